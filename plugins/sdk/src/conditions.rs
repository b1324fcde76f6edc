//! Status conditions that do not churn, and the timestamps they carry.
//!
//! [`Condition`] and [`Time`] read and write the same JSON as `k8s-openapi`'s
//! `Condition` and `Time`, without linking a date library: a plugin that
//! writes conditions stays small.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time as Kubernetes writes it: RFC 3339 in UTC, whole seconds
/// (`2026-01-02T03:04:05Z`).
///
/// Reading accepts any RFC 3339 timestamp (`T`, `t` or a space between date
/// and time, optional seconds and fraction, `Z` or a numeric offset) and
/// normalizes it to that form, as `k8s-openapi`'s `Time` does: the offset is
/// applied and the fraction dropped. (`k8s-openapi` also reads ISO 8601 basic
/// format and RFC 9557 annotations, which Kubernetes never writes; those are
/// refused here.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(String);

/// Seconds since the epoch of the earliest and latest timestamps accepted
/// (those of `jiff::Timestamp`, which `k8s-openapi`'s `Time` wraps).
const MIN_SECONDS: i64 = -377705023201;
const MAX_SECONDS: i64 = 253402207200;

impl Time {
    /// Parse an RFC 3339 timestamp; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Time> {
        let seconds = parse_rfc3339(text.as_bytes())?;
        Some(Time(format_utc(seconds)))
    }

    /// The normalized text, e.g. `2026-01-02T03:04:05Z`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Time::parse(&text).ok_or_else(|| serde::de::Error::custom("not an RFC 3339 timestamp"))
    }
}

/// Parse `text` into an RFC 3339 timestamp (`time(&ctx.now)`); `None` if it
/// is not one.
pub fn time(rfc3339: &str) -> Option<Time> {
    Time::parse(rfc3339)
}

struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    /// Exactly `n` decimal digits.
    fn number(&mut self, n: usize) -> Option<i64> {
        let digits = self.text.get(self.at..self.at + n)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at += n;
        Some(digits.iter().fold(0, |v, d| v * 10 + i64::from(d - b'0')))
    }
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp, fraction dropped.
fn parse_rfc3339(text: &[u8]) -> Option<i64> {
    let mut c = Cursor { text, at: 0 };
    let year = c.number(4)?;
    c.eat(b'-').then_some(())?;
    let month = c.number(2)?;
    c.eat(b'-').then_some(())?;
    let day = c.number(2)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    (c.eat(b'T') || c.eat(b't') || c.eat(b' ')).then_some(())?;
    let hour = c.number(2)?;
    c.eat(b':').then_some(())?;
    let minute = c.number(2)?;
    let mut second = 0;
    if c.eat(b':') {
        second = c.number(2)?;
        if c.eat(b'.') || c.eat(b',') {
            let start = c.at;
            while c.peek().is_some_and(|b| b.is_ascii_digit()) {
                c.at += 1;
            }
            if !(1..=9).contains(&(c.at - start)) {
                return None;
            }
        }
    }
    // A leap second reads as the second before it.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let second = second.min(59);
    let offset = if c.eat(b'Z') || c.eat(b'z') {
        0
    } else {
        let sign = if c.eat(b'+') {
            1
        } else if c.eat(b'-') {
            -1
        } else {
            return None;
        };
        let hours = c.number(2)?;
        let minutes = if c.eat(b':') {
            c.number(2)?
        } else {
            c.number(2).unwrap_or(0)
        };
        if hours > 25 || minutes > 59 {
            return None;
        }
        sign * (hours * 3600 + minutes * 60)
    };
    if c.at != text.len() {
        return None;
    }
    let seconds =
        days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset;
    (MIN_SECONDS..=MAX_SECONDS)
        .contains(&seconds)
        .then_some(seconds)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The date of a day count from [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `%Y-%m-%dT%H:%M:%SZ` of a time in seconds since the epoch.
fn format_utc(seconds: i64) -> String {
    let (days, secs) = (seconds.div_euclid(86400), seconds.rem_euclid(86400));
    let (year, month, day) = civil_from_days(days);
    let mut out = String::with_capacity(21);
    // jiff's `%Y`: four characters, a minus sign counting as one.
    let width = if year < 0 {
        out.push('-');
        3
    } else {
        4
    };
    let digits = year.abs().to_string();
    for _ in digits.len()..width {
        out.push('0');
    }
    out.push_str(&digits);
    let rest = [
        ('-', month),
        ('-', day),
        ('T', secs / 3600),
        (':', secs / 60 % 60),
        (':', secs % 60),
    ];
    for (sep, value) in rest {
        out.push(sep);
        if value < 10 {
            out.push('0');
        }
        out.push_str(&value.to_string());
    }
    out.push('Z');
    out
}

/// A status condition (`metav1.Condition`), as `k8s-openapi`'s `Condition`
/// reads and writes it: missing strings read as empty, `lastTransitionTime`
/// is required, unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `type`, e.g. `Ready`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: Time,
    /// The parent's `metadata.generation` this condition was set for.
    pub observed_generation: Option<i64>,
}

/// Condition as read: `null` or missing strings are empty.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionFields {
    #[serde(default)]
    #[serde(rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    last_transition_time: Time,
    #[serde(default)]
    observed_generation: Option<i64>,
}

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let c = ConditionFields::deserialize(deserializer)?;
        Ok(Condition {
            type_: c.type_.unwrap_or_default(),
            status: c.status.unwrap_or_default(),
            reason: c.reason.unwrap_or_default(),
            message: c.message.unwrap_or_default(),
            last_transition_time: c.last_transition_time,
            observed_generation: c.observed_generation,
        })
    }
}

/// Condition as written, in `k8s-openapi`'s field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConditionRef<'a> {
    last_transition_time: &'a Time,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    reason: &'a str,
    status: &'a str,
    #[serde(rename = "type")]
    type_: &'a str,
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ConditionRef {
            last_transition_time: &self.last_transition_time,
            message: &self.message,
            observed_generation: self.observed_generation,
            reason: &self.reason,
            status: &self.status,
            type_: &self.type_,
        }
        .serialize(serializer)
    }
}

/// Set condition `new` in `conditions`, keeping `lastTransitionTime` when the
/// condition's status did not change. Without this, every reconcile would
/// write a new timestamp and the host would write status on every call.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = new;
        }
        None => conditions.push(new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as k8s;
    use serde_json::{Value, json};

    /// What `k8s-openapi`'s `Time` makes of `text`: normalized, or refused.
    fn k8s_time(text: &str) -> Option<String> {
        let time: k8s::Time = serde_json::from_value(Value::String(text.into())).ok()?;
        Some(serde_json::to_value(time).unwrap().as_str()?.to_string())
    }

    #[test]
    fn the_range_is_jiffs() {
        use k8s_openapi::jiff::Timestamp;
        assert_eq!(Timestamp::MIN.as_second(), MIN_SECONDS);
        assert_eq!(Timestamp::MAX.as_second(), MAX_SECONDS);
    }

    #[test]
    fn rfc3339_timestamps_read_as_k8s_openapi_reads_them() {
        let cases = [
            "2026-11-30T10:00:00Z",
            "2026-11-30t10:00:00z",
            "2026-11-30 10:00:00Z",
            "2026-11-30T10:00Z",
            "2026-11-30T10:00:00.5Z",
            "2026-11-30T10:00:00,123456789Z",
            "2026-11-30T10:00:00.1234567890Z",
            "2026-11-30T10:00:00.Z",
            "2026-11-30T23:30:00-01:00",
            "2026-11-30T00:30:00+01:00",
            "2026-11-30T00:30:00+0130",
            "2026-11-30T00:30:00+01",
            "2026-11-30T00:30:00+25:59",
            "2026-11-30T00:30:00+26:00",
            "2026-11-30T00:30:00+01:60",
            "2026-11-30T00:30:00-00:00",
            "2024-02-29T12:00:00Z",
            "2023-02-29T12:00:00Z",
            "2026-04-31T12:00:00Z",
            "2026-13-01T12:00:00Z",
            "2026-00-01T12:00:00Z",
            "2026-01-00T12:00:00Z",
            "2026-12-31T23:59:60Z",
            "2026-12-31T24:00:00Z",
            "2026-12-31T23:60:00Z",
            "1969-12-31T23:59:59Z",
            "1900-03-01T00:00:00+14:00",
            "0000-01-01T00:00:00Z",
            "0000-01-01T00:00:00+01:00",
            "9999-12-30T22:00:00Z",
            "9999-12-30T22:00:01Z",
            "9999-12-31T23:59:59Z",
            "2026-11-30T10:00:00",
            "2026-11-30",
            "",
            "2026-11-30T10:00:00Z ",
            " 2026-11-30T10:00:00Z",
            "2026-11-30T1:00:00Z",
            "26-11-30T10:00:00Z",
        ];
        let differ: Vec<_> = cases
            .iter()
            .map(|case| (case, Time::parse(case).map(|t| t.0), k8s_time(case)))
            .filter(|(_, ours, theirs)| ours != theirs)
            .collect();
        assert!(differ.is_empty(), "{differ:#?}");
    }

    #[test]
    fn conditions_read_and_write_as_k8s_openapi_does() {
        let cases = [
            json!({"type": "Ready", "status": "True", "reason": "R", "message": "m",
                   "lastTransitionTime": "2026-11-30T10:00:00Z", "observedGeneration": 3}),
            json!({"type": "Ready", "lastTransitionTime": "2026-11-30T10:00:00.25+02:00",
                   "extra": [1, 2]}),
            json!({"type": null, "status": null, "lastTransitionTime": "2026-11-30T10:00:00Z",
                   "observedGeneration": null}),
            json!({"type": "Ready", "status": "True"}),
            json!({"type": "Ready", "lastTransitionTime": null}),
            json!({"type": "Ready", "lastTransitionTime": "yesterday"}),
            json!({"type": 1, "lastTransitionTime": "2026-11-30T10:00:00Z"}),
        ];
        for case in cases {
            let ours = serde_json::from_value::<Condition>(case.clone())
                .ok()
                .map(|c| serde_json::to_string(&c).unwrap());
            let theirs = serde_json::from_value::<k8s::Condition>(case.clone())
                .ok()
                .map(|c| serde_json::to_string(&c).unwrap());
            assert_eq!(ours, theirs, "{case}");
        }
    }
}
