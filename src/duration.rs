//! Duration strings of the config and flags: a number with a unit (`500ms`,
//! `30s`, `5m`, `1h`), or a bare `0`.

use std::time::Duration;

/// Parses a duration; a bare number other than `0` is an error.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "invalid duration '{text}': give a unit, e.g. 500ms, 30s, 5m, 1h"
        ));
    }
    humantime::parse_duration(text).map_err(|e| format!("invalid duration '{text}': {e}"))
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
}
