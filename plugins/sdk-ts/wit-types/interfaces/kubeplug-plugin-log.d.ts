declare module 'kubeplug:plugin/log@0.1.0' {
  /**
   * Log a message with key/value fields. The host adds the plugin name and
   * the object being reconciled.
   */
  export function log(level: Level, message: string, fields: Array<[string, string]>): void;
  /**
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
