// Structured logging through the host: the plugin's only import.
import { log as hostLog } from 'kubeplug:plugin/log@0.1.0';

type Fields = Record<string, string | number | boolean>;
const emit = (level: 'debug' | 'info' | 'warn' | 'error', message: string, fields: Fields = {}) =>
  hostLog(level, message, Object.entries(fields).map(([k, v]) => [k, String(v)]));

export const log = {
  debug: (message: string, fields?: Fields) => emit('debug', message, fields),
  info: (message: string, fields?: Fields) => emit('info', message, fields),
  warn: (message: string, fields?: Fields) => emit('warn', message, fields),
  error: (message: string, fields?: Fields) => emit('error', message, fields),
};
