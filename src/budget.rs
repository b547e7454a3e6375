//! Budgets across runs (SPEC section 19), as vocabulary: a cap of USD per
//! calendar period in UTC (`Period`: an hour, a day, an ISO week from
//! Monday 00:00, a month) for the whole fleet, one model or one provider
//! (`Scope`), its stable key in the shared record, and money as whole
//! nano-dollars so that spend adds up exactly. A leaf: it imports nothing
//! of ours. What a spent budget means for a run is decided in
//! `model::gate::budget`.

use std::fmt;

use chrono::{DateTime, Datelike, Months, NaiveDate, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch (as the health record counts time).
pub(crate) type Millis = i64;

/// Money in the shared record: whole billionths of a USD, so that adding
/// many small costs is exact and a cap is reached on the response that
/// reaches it, not one later.
pub(crate) type Nanos = i64;

const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;

/// `usd` in nano-dollars (rounded; negative and non-finite amounts are 0).
pub(crate) fn nanos(usd: f64) -> Nanos {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1e9).round().min(Nanos::MAX as f64) as Nanos
    } else {
        0
    }
}

/// Nano-dollars as USD.
pub(crate) fn usd(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// A calendar period in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Period {
    Hour,
    Day,
    /// An ISO week: Monday 00:00 UTC to the next Monday.
    Week,
    Month,
}

impl Period {
    /// The config word (`per: day`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    fn parse(text: &str) -> Option<Period> {
        Some(match text {
            "hour" => Period::Hour,
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            _ => return None,
        })
    }

    /// The period that holds `at`: its start and its end (the next one's
    /// start), in ms since the epoch.
    pub(crate) fn bounds(self, at: Millis) -> (Millis, Millis) {
        let floor = |unit: Millis| at - at.rem_euclid(unit);
        match self {
            Period::Hour => (floor(HOUR), floor(HOUR) + HOUR),
            Period::Day => (floor(DAY), floor(DAY) + DAY),
            Period::Week => {
                // 1970-01-01 was a Thursday: day 0 is 3 days after a Monday.
                let day = at.div_euclid(DAY);
                let monday = (day - (day + 3).rem_euclid(7)) * DAY;
                (monday, monday + 7 * DAY)
            }
            Period::Month => month_bounds(at),
        }
    }
}

/// The calendar month (UTC) that holds `at`.
fn month_bounds(at: Millis) -> (Millis, Millis) {
    let date = DateTime::<Utc>::from_timestamp_millis(at)
        .unwrap_or_default()
        .date_naive();
    let first = NaiveDate::from_ymd_opt(date.year(), date.month(), 1).unwrap_or(date);
    let next = first.checked_add_months(Months::new(1)).unwrap_or(first);
    let ms = |d: NaiveDate| {
        d.and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc().timestamp_millis())
            .unwrap_or(at)
    };
    (ms(first), ms(next))
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Period::parse(text.trim()).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown period '{text}': use hour, day, week or month"
            ))
        })
    }
}

/// What a budget counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// Every response of every run that shares the record.
    Fleet,
    /// The responses of one model spec (`model: SPEC`).
    Model(String),
    /// The responses of every model of one provider (`provider: NAME`).
    Provider(String),
}

/// One cap: `usd` per `per`, over `scope`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Budget {
    pub usd: f64,
    pub per: Period,
    pub scope: Scope,
}

impl Budget {
    /// The budget's key in the shared record: its period and scope, the
    /// amount left out, so that raising a cap keeps what was spent and
    /// every run with the same budget adds to the same total
    /// (`day`, `day model=anthropic/claude-opus-4-1`, `month provider=openai`).
    pub(crate) fn key(&self) -> String {
        match &self.scope {
            Scope::Fleet => self.per.to_string(),
            Scope::Model(spec) => format!("{} model={spec}", self.per),
            Scope::Provider(name) => format!("{} provider={name}", self.per),
        }
    }

    /// The cap in nano-dollars.
    pub(crate) fn cap(&self) -> Nanos {
        nanos(self.usd)
    }

    /// Whether the responses of model `spec` count toward this budget.
    pub(crate) fn applies_to(&self, spec: &str) -> bool {
        match &self.scope {
            Scope::Fleet => true,
            Scope::Model(model) => model == spec,
            Scope::Provider(name) => spec.split_once('/').is_some_and(|(p, _)| p == name),
        }
    }

    /// The model or provider it is for (`None` for a fleet budget).
    pub(crate) fn target(&self) -> Option<&str> {
        match &self.scope {
            Scope::Fleet => None,
            Scope::Model(name) | Scope::Provider(name) => Some(name),
        }
    }
}

/// `$50 per day`, `$10 per day for anthropic/claude-opus-4-1`,
/// `$20 per week for provider openai`.
impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${} per {}", self.usd, self.per)?;
        match &self.scope {
            Scope::Fleet => Ok(()),
            Scope::Model(spec) => write!(f, " for {spec}"),
            Scope::Provider(name) => write!(f, " for provider {name}"),
        }
    }
}

/// A spend as the summary line shows money: `$12.3400`.
pub(crate) fn dollars(spent: Nanos) -> String {
    format!("${:.4}", usd(spent))
}

/// `at` as an RFC 3339 time in UTC, to the second (`2026-12-02T00:00:00Z`).
pub(crate) fn rfc3339(at: Millis) -> String {
    DateTime::<Utc>::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Millis {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn bounds(per: Period, text: &str) -> (String, String) {
        let (start, end) = per.bounds(at(text));
        (rfc3339(start), rfc3339(end))
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn periods_are_calendar_periods_in_utc() {
        let t = "2026-12-31T23:59:59.999Z";
        assert_eq!(
            bounds(Period::Hour, t),
            pair("2026-12-31T23:00:00Z", "2027-01-01T00:00:00Z")
        );
        assert_eq!(
            bounds(Period::Day, t),
            pair("2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z")
        );
        assert_eq!(
            bounds(Period::Month, t),
            pair("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
        );
        // 2026-12-31 is a Thursday: its ISO week began Monday the 28th.
        assert_eq!(
            bounds(Period::Week, t),
            pair("2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z")
        );
        // A Monday at midnight starts its week; a Sunday ends the last one.
        assert_eq!(
            bounds(Period::Week, "2026-11-30T00:00:00Z"),
            pair("2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z")
        );
        assert_eq!(
            bounds(Period::Week, "2026-11-29T23:59:59Z"),
            pair("2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z")
        );
        // A leap February; a time zone offset is only another way to write UTC.
        assert_eq!(
            bounds(Period::Month, "2028-02-29T12:00:00+05:00"),
            pair("2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z")
        );
        assert_eq!(
            bounds(Period::Day, "2026-06-01T01:30:00+02:00"),
            pair("2026-05-31T00:00:00Z", "2026-06-01T00:00:00Z")
        );
        // Before the epoch, floors still go down.
        assert_eq!(
            bounds(Period::Week, "1969-12-31T12:00:00Z"),
            pair("1969-12-29T00:00:00Z", "1970-01-05T00:00:00Z")
        );
    }

    #[test]
    fn keys_leave_the_amount_out() {
        let b = |usd, scope| Budget {
            usd,
            per: Period::Day,
            scope,
        };
        assert_eq!(b(50.0, Scope::Fleet).key(), "day");
        assert_eq!(b(50.0, Scope::Fleet).key(), b(80.0, Scope::Fleet).key());
        let opus = Scope::Model("anthropic/claude-opus-4-1".into());
        assert_eq!(
            b(10.0, opus.clone()).key(),
            "day model=anthropic/claude-opus-4-1"
        );
        assert_eq!(
            b(20.0, Scope::Provider("openai".into())).key(),
            "day provider=openai"
        );
        assert_eq!(
            b(10.0, opus).to_string(),
            "$10 per day for anthropic/claude-opus-4-1"
        );
        assert_eq!(b(2.5, Scope::Fleet).to_string(), "$2.5 per day");
    }

    #[test]
    fn budgets_match_by_spec_or_provider() {
        let model = Budget {
            usd: 1.0,
            per: Period::Day,
            scope: Scope::Model("openai/gpt-5".into()),
        };
        assert!(model.applies_to("openai/gpt-5"));
        assert!(!model.applies_to("openai/gpt-5-mini"));
        let provider = Budget {
            scope: Scope::Provider("openrouter".into()),
            ..model
        };
        assert!(provider.applies_to("openrouter/anthropic/claude-sonnet-4.5"));
        assert!(!provider.applies_to("openai/gpt-5"));
    }

    #[test]
    fn money_adds_up_exactly() {
        let tenth = nanos(0.1);
        assert_eq!((0..10).map(|_| tenth).sum::<Nanos>(), nanos(1.0));
        assert_eq!(nanos(-3.0), 0);
        assert_eq!(nanos(f64::NAN), 0);
        assert_eq!(dollars(nanos(12.34)), "$12.3400");
    }
}
