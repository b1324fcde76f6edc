"""Status conditions that do not churn, and the timestamps they carry.

A port of the Rust SDK's `conditions.rs`: `parse_time` reads RFC 3339 the way
`k8s-openapi`'s `Time` does (offset applied, fraction dropped, whole seconds,
`Z`), and `set_condition` keeps `lastTransitionTime` when a condition's
status did not change, so that status is not rewritten on every reconcile.
"""

from __future__ import annotations

from typing import Optional

# Seconds since the epoch of the earliest and latest timestamps accepted
# (those of jiff::Timestamp, which k8s-openapi's Time wraps).
MIN_SECONDS = -377705023201
MAX_SECONDS = 253402207200


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        return 29 if _is_leap(y) else 28
    return 30 if m in (4, 6, 9, 11) else 31


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 (Howard Hinnant's algorithm)."""
    y = y - 1 if m <= 2 else y
    era = y // 400
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(days: int):
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if m <= 2 else 0), m, d


class _Cursor:
    def __init__(self, text: str):
        self.text, self.at = text, 0

    def peek(self):
        return self.text[self.at] if self.at < len(self.text) else None

    def eat(self, ch: str) -> bool:
        if self.peek() == ch:
            self.at += 1
            return True
        return False

    def number(self, n: int) -> Optional[int]:
        digits = self.text[self.at:self.at + n]
        if len(digits) != n or not all("0" <= c <= "9" for c in digits):
            return None
        self.at += n
        return int(digits)


def _parse_seconds(text: str) -> Optional[int]:
    c = _Cursor(text)
    year = c.number(4)
    if year is None or not c.eat("-"):
        return None
    month = c.number(2)
    if month is None or not c.eat("-"):
        return None
    day = c.number(2)
    if day is None or not 1 <= month <= 12 or day < 1 or day > _days_in_month(year, month):
        return None
    if not (c.eat("T") or c.eat("t") or c.eat(" ")):
        return None
    hour = c.number(2)
    if hour is None or not c.eat(":"):
        return None
    minute = c.number(2)
    if minute is None:
        return None
    second = 0
    if c.eat(":"):
        second = c.number(2)
        if second is None:
            return None
        if c.eat(".") or c.eat(","):
            start = c.at
            while c.peek() is not None and "0" <= c.peek() <= "9":
                c.at += 1
            if not 1 <= c.at - start <= 9:
                return None
    if hour > 23 or minute > 59 or second > 60:
        return None
    second = min(second, 59)  # a leap second reads as the second before it
    if c.eat("Z") or c.eat("z"):
        offset = 0
    else:
        if c.eat("+"):
            sign = 1
        elif c.eat("-"):
            sign = -1
        else:
            return None
        hours = c.number(2)
        if hours is None:
            return None
        if c.eat(":"):
            minutes = c.number(2)
            if minutes is None:
                return None
        else:
            minutes = c.number(2)
            minutes = 0 if minutes is None else minutes
        if hours > 25 or minutes > 59:
            return None
        offset = sign * (hours * 3600 + minutes * 60)
    if c.at != len(text):
        return None
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset
    return seconds if MIN_SECONDS <= seconds <= MAX_SECONDS else None


def _format_utc(seconds: int) -> str:
    days, secs = divmod(seconds, 86400)
    y, m, d = _civil_from_days(days)
    year = f"-{abs(y):03d}" if y < 0 else f"{y:04d}"
    return f"{year}-{m:02d}-{d:02d}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}Z"


def parse_time(text) -> Optional[str]:
    """Normalize an RFC 3339 timestamp to `YYYY-MM-DDTHH:MM:SSZ`; None if
    `text` is not one (same acceptance as the Rust SDK's `time`)."""
    if not isinstance(text, str):
        return None
    seconds = _parse_seconds(text)
    return None if seconds is None else _format_utc(seconds)


def label_safe_time(text: str) -> Optional[str]:
    """`now` as a label value (`20261129T180000Z`): label values may not
    contain `:`. None if `text` is not RFC 3339."""
    t = parse_time(text)
    return None if t is None else t.replace("-", "").replace(":", "")


def _is_i64(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


def read_condition(value) -> Optional[dict]:
    """A condition as the Rust SDK's `Condition` reads and rewrites it:
    missing/null strings become "", `lastTransitionTime` required and
    normalized, unknown fields dropped; None when it does not read."""
    if not isinstance(value, dict):
        return None
    out = {}
    for key in ("type", "status", "reason", "message"):
        v = value.get(key)
        if v is None:
            v = ""
        if not isinstance(v, str):
            return None
        out[key] = v
    t = parse_time(value.get("lastTransitionTime"))
    if t is None:
        return None
    out["lastTransitionTime"] = t
    gen = value.get("observedGeneration")
    if gen is not None:
        if not _is_i64(gen):
            return None
        out["observedGeneration"] = gen
    return out


def condition(type: str, status: str, reason: str, message: str, now: str,
              observed_generation: Optional[int] = None) -> dict:
    """A condition dict in the form the Rust SDK writes (observedGeneration
    omitted when None)."""
    c = {"type": type, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": now}
    if observed_generation is not None:
        c["observedGeneration"] = observed_generation
    return c


def set_condition(conditions: list, type: str, status: str, reason: str, message: str,
                  now: str, observed_generation: Optional[int] = None) -> list:
    """Set condition `type` in `conditions` (a list of dicts, changed in
    place and returned): it replaces the existing condition of that type,
    keeping its `lastTransitionTime` when `status` is unchanged; else it is
    appended with `lastTransitionTime: now`. Without this every reconcile
    would write a new timestamp and the host would write status each call."""
    new = condition(type, status, reason, message, now, observed_generation)
    for i, existing in enumerate(conditions):
        if existing.get("type") == type:
            if existing.get("status") == status:
                new["lastTransitionTime"] = existing.get("lastTransitionTime")
            conditions[i] = new
            return conditions
    conditions.append(new)
    return conditions
