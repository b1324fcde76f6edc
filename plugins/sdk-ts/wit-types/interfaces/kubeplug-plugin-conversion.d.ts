/// <reference path="./kubeplug-plugin-types.d.ts" />
declare module 'kubeplug:plugin/conversion@0.1.0' {
  /**
   * Convert each object (JSON, of the parent kind, at any served version)
   * to `api-version` (e.g. `example.com/v2`); answer them in the same
   * order. Only `apiVersion`, the body and `metadata.labels` and
   * `metadata.annotations` may change: the host refuses an answer that
   * changes any other metadata, the kind, or the count. Conversions must
   * not lose data: what one version cannot hold is kept in an annotation,
   * so that every object survives a round trip unchanged.
   */
  export function convert(objects: Array<string>, apiVersion: string, config: string): Array<string>;
  export type Error = import('kubeplug:plugin/types@0.1.0').Error;
}
