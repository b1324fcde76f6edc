/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/reads@0.1.0' {
  /**
   * Kinds of which the plugin reads only `apiVersion`, `kind` and
   * `metadata` (labels, annotations, owners...): the host watches them
   * metadata-only and hands them over as such. Allowed for related kinds
   * and for a decorator's parent; never for children or a composite's
   * parent, whose bodies the host itself compares.
   */
  export function metadataOnly(config: string): Array<ApiResource>;
  export type ApiResource = import('kubeplug:plugin/types@0.1.0').ApiResource;
}
