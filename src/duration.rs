//! Duration strings of the config and flags: a number with a unit (`500ms`,
//! `30s`, `5m`, `1h`), or a bare `0`; and the same short form for output
//! (`compact`). The one place they are parsed: the config deserialises its
//! durations here (`deserialize`), the flags and scripts call `parse`. A
//! leaf module: it imports nothing of ours.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// A duration that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// A bare number other than `0`, or nothing at all.
    #[error("invalid duration '{0}': give a unit, e.g. 500ms, 30s, 5m, 1h")]
    NoUnit(String),
    /// What humantime could not read, with its reason.
    #[error("invalid duration '{text}': {reason}")]
    Invalid { text: String, reason: String },
}

/// Parses a duration; a bare number other than `0` is an error.
pub(crate) fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(DurationError::NoUnit(text.to_string()));
    }
    humantime::parse_duration(text).map_err(|e| DurationError::Invalid {
        text: text.to_string(),
        reason: e.to_string(),
    })
}

/// `deserialize_with` for an optional config duration: a string with a
/// unit, or a bare number (only `0` is valid).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    d.deserialize_any(DurationVisitor).map(Some)
}

/// Reads a YAML string or number as a duration.
pub(crate) struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 30s")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse(text).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Duration, E> {
        self.visit_str(&n.to_string())
    }
}

/// A duration in the short form `parse` reads back: its parts from hours
/// down to milliseconds, zero parts left out (`10m`, `1m30s`, `2s`,
/// `1s500ms`, `0s`).
pub(crate) fn compact(d: Duration) -> String {
    let ms = d.as_millis();
    let parts = [
        (ms / 3_600_000, "h"),
        (ms / 60_000 % 60, "m"),
        (ms / 1000 % 60, "s"),
        (ms % 1000, "ms"),
    ];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".to_string()
    } else {
        text
    }
}

/// `compact` to the whole second from a second up (a time waited).
pub(crate) fn compact_seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return compact(Duration::from_millis(d.as_millis() as u64));
    }
    compact(Duration::from_secs(d.as_secs_f64().round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_zero() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("30").is_err());
        assert!(parse("").is_err());
        assert!(parse("soon").is_err());
    }

    #[test]
    fn compact_reads_back() {
        for (d, text) in [
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(1500), "1s500ms"),
            (Duration::from_secs(3600 + 60), "1h1m"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(compact(d), text);
            assert_eq!(parse(text).unwrap(), d, "{text}");
        }
        assert_eq!(compact_seconds(Duration::from_millis(90_400)), "1m30s");
        assert_eq!(compact_seconds(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn config_values_are_strings_or_a_bare_zero() {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "deserialize")]
            d: Option<Duration>,
        }
        let read = |yaml: &str| serde_yaml::from_str::<T>(yaml).map(|t| t.d);
        assert_eq!(read("d: 2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(read("d: 0").unwrap(), Some(Duration::ZERO));
        assert_eq!(read("{}").unwrap(), None);
        let e = read("d: 30").unwrap_err().to_string();
        assert!(e.contains("invalid duration '30': give a unit"), "{e}");
        assert!(read("d: [1]").is_err());
    }
}
