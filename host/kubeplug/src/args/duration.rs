//! Durations on the command line, written as Go and kubectl write them
//! (`30s`, `2m`, `1h30m`, `500ms`, `1.5s`), so that a flag reads the same
//! as `kubectl --request-timeout` or a controller-runtime flag.
//!
//! A bare number is accepted too, in the unit the flag had before it took
//! durations (seconds for `--api-timeout`, `--resync`, ...), so existing
//! command lines and environment variables keep their meaning.

use std::time::Duration;

/// Nanoseconds per unit, longest suffix first where one is a prefix of
/// another (`ms` before `m`, `ns` before `s`...).
const UNITS: &[(&str, f64)] = &[
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("μs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
    ("m", 60e9),
    ("h", 3600e9),
];

/// A Go duration (`time.ParseDuration`): one or more decimal numbers, each
/// with a unit (`ns`, `us`, `ms`, `s`, `m`, `h`), e.g. `1h2m0.5s`; `0`
/// alone needs no unit. Negative durations are refused: no flag takes one.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let wrong = || DurationError::NotADuration(text.into());
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with(['-', '+']) {
        return Err(wrong());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(wrong)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| wrong())?;
        rest = &rest[number_len..];
        let (unit, scale) = UNITS
            .iter()
            .filter(|(unit, _)| rest.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())
            .ok_or_else(wrong)?;
        rest = &rest[unit.len()..];
        nanos += number * scale;
    }
    if !nanos.is_finite() || nanos > u64::MAX as f64 {
        return Err(DurationError::TooLong(text.into()));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// A flag's duration that is not one; the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration: give a number with a unit, such as 30s, 2m, 1h30m or 500ms")]
    NotADuration(String),
    #[error("{0:?} is too long a duration")]
    TooLong(String),
    #[error("{0:?}: a duration cannot be negative")]
    Negative(String),
}

/// A duration, or a bare number of seconds (the flags that used to take
/// seconds: `--api-timeout 30`, `--resync 600`).
pub fn seconds_or_duration(text: &str) -> Result<Duration, DurationError> {
    bare_or_duration(text, 1.0)
}

/// A duration, or a bare number of milliseconds (the flags that used to
/// take milliseconds: `--timeout 2000`, `--debounce 500`).
pub fn millis_or_duration(text: &str) -> Result<Duration, DurationError> {
    bare_or_duration(text, 1e-3)
}

fn bare_or_duration(text: &str, seconds_per_unit: f64) -> Result<Duration, DurationError> {
    match text.trim().parse::<f64>() {
        Ok(number) if number.is_finite() && number >= 0.0 => {
            Duration::try_from_secs_f64(number * seconds_per_unit)
                .map_err(|_| DurationError::TooLong(text.into()))
        }
        Ok(_) => Err(DurationError::Negative(text.into())),
        Err(_) => parse(text),
    }
}

/// A flag's duration: parsed by [`seconds_or_duration`], shown by
/// [`display`] (so `--help` prints `[default: 10m]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl std::str::FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, DurationError> {
        seconds_or_duration(text).map(GoDuration)
    }
}

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display(self.0))
    }
}

/// How a duration reads back in help text and messages (`2s`, `1m30s`,
/// `500ms`), the way Go prints it for whole units.
pub fn display(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return if duration.is_zero() {
            "0s".into()
        } else {
            format!("{}us", duration.as_micros())
        };
    }
    if !millis.is_multiple_of(1000) {
        return if millis < 1000 {
            format!("{millis}ms")
        } else {
            format!("{}s", duration.as_secs_f64())
        };
    }
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 || (h > 0 && s > 0) {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse("30s"), Ok(ms(30_000)));
        assert_eq!(parse("2m"), Ok(ms(120_000)));
        assert_eq!(parse("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse("500ms"), Ok(ms(500)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("10ns"), Ok(Duration::from_nanos(10)));
        assert_eq!(parse("1m0.5s"), Ok(ms(60_500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for wrong in ["", "s", "5", "1x", "-1s", "1s2", "1..5s", "ms5"] {
            assert!(parse(wrong).is_err(), "{wrong:?}");
        }
        assert!(parse("5").unwrap_err().to_string().contains("30s, 2m"));
    }

    #[test]
    fn a_bare_number_keeps_the_unit_the_flag_had() {
        assert_eq!(seconds_or_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(seconds_or_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds_or_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(millis_or_duration("2000"), Ok(Duration::from_secs(2)));
        assert_eq!(millis_or_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(seconds_or_duration("-1").is_err());
        assert!(millis_or_duration("soon").is_err());
    }

    #[test]
    fn durations_read_back_as_they_are_written() {
        for text in [
            "0s", "500ms", "2s", "1.5s", "30s", "10m", "1m30s", "1h", "1h0m5s",
        ] {
            assert_eq!(display(parse(text).unwrap()), text);
        }
    }
}
