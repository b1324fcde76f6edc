// Status conditions that do not churn, and the timestamps they carry: a port
// of the Rust SDK's conditions.rs. Reading and writing match k8s-openapi's
// `Condition` and `Time` (and so the Rust plugins) exactly, so a TS port of a
// Rust plugin writes the same status.

/** Seconds since the epoch of the earliest and latest accepted timestamps
 * (jiff's, which k8s-openapi's `Time` wraps). */
const MIN_SECONDS = -377705023201;
const MAX_SECONDS = 253402207200;

const divEuclid = (a: number, b: number) => Math.floor(a / b);
const remEuclid = (a: number, b: number) => a - Math.floor(a / b) * b;

const isLeap = (y: number) => y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
function daysInMonth(y: number, m: number): number {
  if (m === 2) return isLeap(y) ? 29 : 28;
  return m === 4 || m === 6 || m === 9 || m === 11 ? 30 : 31;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (Hinnant). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = divEuclid(y, 400);
  const yoe = y - era * 400;
  const mp = (month + 9) % 12;
  const doy = Math.trunc((153 * mp + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.trunc(yoe / 4) - Math.trunc(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

function civilFromDays(days: number): [number, number, number] {
  const z = days + 719468;
  const era = divEuclid(z, 146097);
  const doe = z - era * 146097;
  const yoe = Math.trunc(
    (doe - Math.trunc(doe / 1460) + Math.trunc(doe / 36524) - Math.trunc(doe / 146096)) / 365,
  );
  const doy = doe - (365 * yoe + Math.trunc(yoe / 4) - Math.trunc(yoe / 100));
  const mp = Math.trunc((5 * doy + 2) / 153);
  const day = doy - Math.trunc((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (month <= 2 ? 1 : 0), month, day];
}

const pad2 = (n: number) => (n < 10 ? '0' : '') + n;

/** `%Y-%m-%dT%H:%M:%SZ` (jiff's `%Y`: four characters, a minus counting). */
function formatUtc(seconds: number): string {
  const days = divEuclid(seconds, 86400);
  const secs = remEuclid(seconds, 86400);
  const [year, month, day] = civilFromDays(days);
  const digits = String(Math.abs(year));
  const yearText = year < 0 ? '-' + digits.padStart(3, '0') : digits.padStart(4, '0');
  return (
    `${yearText}-${pad2(month)}-${pad2(day)}T` +
    `${pad2(Math.trunc(secs / 3600))}:${pad2(Math.trunc(secs / 60) % 60)}:${pad2(secs % 60)}Z`
  );
}

/** Seconds since the epoch of an RFC 3339 timestamp (fraction dropped), or
 * null. Same grammar as the Rust SDK's `parse_rfc3339`. */
function parseRfc3339(text: string): number | null {
  let at = 0;
  const eat = (c: string) => (text[at] === c ? (at++, true) : false);
  const number = (n: number): number | null => {
    const digits = text.slice(at, at + n);
    if (digits.length !== n || !/^[0-9]+$/.test(digits)) return null;
    at += n;
    return Number(digits);
  };
  const year = number(4);
  if (year === null || !eat('-')) return null;
  const month = number(2);
  if (month === null || !eat('-')) return null;
  const day = number(2);
  if (day === null) return null;
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (!(eat('T') || eat('t') || eat(' '))) return null;
  const hour = number(2);
  if (hour === null || !eat(':')) return null;
  const minute = number(2);
  if (minute === null) return null;
  let second = 0;
  if (eat(':')) {
    const s = number(2);
    if (s === null) return null;
    second = s;
    if (eat('.') || eat(',')) {
      const start = at;
      while (at < text.length && text[at] >= '0' && text[at] <= '9') at++;
      if (at - start < 1 || at - start > 9) return null;
    }
  }
  // A leap second reads as the second before it.
  if (hour > 23 || minute > 59 || second > 60) return null;
  second = Math.min(second, 59);
  let offset: number;
  if (eat('Z') || eat('z')) {
    offset = 0;
  } else {
    let sign: number;
    if (eat('+')) sign = 1;
    else if (eat('-')) sign = -1;
    else return null;
    const hours = number(2);
    if (hours === null) return null;
    let minutes: number | null;
    if (eat(':')) {
      minutes = number(2);
      if (minutes === null) return null;
    } else {
      minutes = number(2) ?? 0;
    }
    if (hours > 25 || minutes > 59) return null;
    offset = sign * (hours * 3600 + minutes * 60);
  }
  if (at !== text.length) return null;
  const seconds =
    daysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset;
  return seconds >= MIN_SECONDS && seconds <= MAX_SECONDS ? seconds : null;
}

/** Parse an RFC 3339 timestamp and normalize it as Kubernetes writes it
 * (UTC, whole seconds: `2026-01-02T03:04:05Z`); null if it is not one. */
export function time(rfc3339: string): string | null {
  const seconds = parseRfc3339(rfc3339);
  return seconds === null ? null : formatUtc(seconds);
}

/** A status condition (`metav1.Condition`). */
export interface ConditionFields {
  type: string;
  /** `True`, `False` or `Unknown`. */
  status: string;
  reason: string;
  message: string;
  /** When `status` last changed (normalized RFC 3339, see `time`). */
  lastTransitionTime: string;
  /** The parent's `metadata.generation` this condition was set for. */
  observedGeneration?: number | null;
}

/** A condition that serializes (JSON.stringify) in k8s-openapi's field order
 * and omits a missing `observedGeneration`, like the Rust SDK. */
export class Condition implements ConditionFields {
  type: string;
  status: string;
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number | null;

  constructor(c: ConditionFields) {
    this.type = c.type;
    this.status = c.status;
    this.reason = c.reason;
    this.message = c.message;
    this.lastTransitionTime = c.lastTransitionTime;
    this.observedGeneration = c.observedGeneration;
  }

  /** Read a condition as k8s-openapi does: missing/null strings are empty,
   * `lastTransitionTime` is required and normalized, unknown fields are
   * dropped. Null if it does not read. */
  static parse(value: unknown): Condition | null {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
    const v = value as Record<string, unknown>;
    const str = (k: string): string | null => {
      const x = v[k];
      if (x === undefined || x === null) return '';
      return typeof x === 'string' ? x : null;
    };
    const type = str('type'), status = str('status'), reason = str('reason'), message = str('message');
    if (type === null || status === null || reason === null || message === null) return null;
    const ltt = v.lastTransitionTime;
    const lastTransitionTime = typeof ltt === 'string' ? time(ltt) : null;
    if (lastTransitionTime === null) return null;
    const og = v.observedGeneration;
    if (og !== undefined && og !== null && !isI64(og)) return null;
    return new Condition({
      type, status, reason, message, lastTransitionTime,
      observedGeneration: og === null ? undefined : (og as number | undefined),
    });
  }

  /** A list of conditions, or null if the value or any element does not read
   * (serde reads a `Vec<Condition>` all or nothing). */
  static parseList(value: unknown): Condition[] | null {
    if (!Array.isArray(value)) return null;
    const out: Condition[] = [];
    for (const item of value) {
      const c = Condition.parse(item);
      if (c === null) return null;
      out.push(c);
    }
    return out;
  }

  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = {
      lastTransitionTime: this.lastTransitionTime,
      message: this.message,
    };
    if (this.observedGeneration !== undefined && this.observedGeneration !== null) {
      out.observedGeneration = this.observedGeneration;
    }
    out.reason = this.reason;
    out.status = this.status;
    out.type = this.type;
    return out;
  }
}

/** True for a JSON number serde reads as an i64 (an integer in range). */
export function isI64(x: unknown): x is number {
  return typeof x === 'number' && Number.isInteger(x) && x >= -(2 ** 63) && x < 2 ** 63;
}

/** Set condition `next` in `conditions` (in place), keeping
 * `lastTransitionTime` when that condition's status did not change: without
 * this every reconcile would write a new timestamp and the host would write
 * status on every call. Same semantics as the Rust SDK's `set_condition`. */
export function setCondition(conditions: Condition[], next: ConditionFields): void {
  const c = next instanceof Condition ? next : new Condition(next);
  const i = conditions.findIndex((x) => x.type === c.type);
  if (i < 0) {
    conditions.push(c);
    return;
  }
  if (conditions[i].status === c.status) c.lastTransitionTime = conditions[i].lastTransitionTime;
  conditions[i] = c;
}
