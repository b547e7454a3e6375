//! `limits:` and the named providers' own `limits:` resolved (SPEC 24):
//! each entry's `model` a spec (or a glob of specs) of a known provider,
//! each `provider` a known one; then, for each member of a chain, the
//! windows of every entry that matches it. Counts, periods and unknown
//! keys are checked as each file is read (`config/rate_limits.rs`), so
//! those errors name the file.

use std::collections::BTreeMap;

use crate::config::{LimitEntry, ProviderConfig, Rates};
use crate::health::{Dim, Window};
use crate::model::spec::builtin;
use crate::setup::SetupError;

/// Which members an entry applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    /// Specs matching a glob (`*`: any run of characters).
    Model(String),
    /// Every model of a provider.
    Provider(String),
}

/// The declared limits of a run, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeclaredLimits {
    entries: Vec<(Scope, Vec<Window>)>,
}

/// Most characters of a `model` glob (matching stays cheap).
const MAX_GLOB: usize = 512;

impl DeclaredLimits {
    /// The windows that apply to the member `spec` (`provider/model`),
    /// every matching entry's, each once.
    pub(crate) fn windows(&self, spec: &str) -> Vec<Window> {
        let provider = spec.split_once('/').map_or(spec, |(p, _)| p);
        let mut out: Vec<Window> = Vec::new();
        for (scope, windows) in &self.entries {
            let applies = match scope {
                Scope::Model(glob) => glob_matches(glob, spec),
                Scope::Provider(name) => name == provider,
            };
            if applies {
                for w in windows {
                    if !out.contains(w) {
                        out.push(*w);
                    }
                }
            }
        }
        out
    }
}

/// One limit of a member as `--check` and `/model` list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedLimit {
    /// `24 requests/min`.
    pub limit: String,
    /// `declared` or `learned`.
    pub source: &'static str,
}

/// The limits of each of `models` (specs with their pacing keys): every
/// declared one, then the learned one the record at `location` keeps
/// (`None`: the record is off or cannot be read; none listed).
pub(crate) fn listed(
    declared: &DeclaredLimits,
    models: &[(String, crate::health::PaceKey)],
    location: Option<&crate::health::Location>,
) -> Vec<Vec<ListedLimit>> {
    let keys: Vec<_> = models.iter().map(|(_, key)| key.clone()).collect();
    let learned = location
        .and_then(|l| l.read_learned(&keys).ok())
        .unwrap_or_else(|| vec![None; keys.len()]);
    models
        .iter()
        .zip(learned)
        .map(|((spec, _), learned)| {
            let mut out: Vec<ListedLimit> = declared
                .windows(spec)
                .iter()
                .map(|w| ListedLimit {
                    limit: w.to_string(),
                    source: "declared",
                })
                .collect();
            if let Some(rpm) = learned {
                out.push(ListedLimit {
                    limit: format!("{rpm} requests/min"),
                    source: "learned",
                });
            }
            out
        })
        .collect()
}

/// A limit's windows: one per count given.
fn windows(rates: &Rates) -> Vec<Window> {
    let per_ms = rates.per.millis();
    [
        (Dim::Requests, rates.requests),
        (Dim::InputTokens, rates.input_tokens),
        (Dim::OutputTokens, rates.output_tokens),
        (Dim::Tokens, rates.tokens),
    ]
    .into_iter()
    .filter_map(|(dim, limit)| {
        Some(Window {
            dim,
            limit: limit?,
            per_ms,
        })
    })
    .collect()
}

/// The configured limits, in config order, then the named providers'.
pub(super) fn resolve(
    config: Option<&[LimitEntry]>,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Result<DeclaredLimits, SetupError> {
    let known = |name: &str| builtin(name).is_some() || providers.contains_key(name);
    let mut entries = Vec::new();
    for (i, entry) in config.unwrap_or_default().iter().enumerate() {
        let at = |field: &str, message: String| {
            SetupError(format!("config limits[{i}].{field}: {message}"))
        };
        let scope = match (&entry.model, &entry.provider) {
            (Some(glob), _) => {
                let glob = glob.trim();
                let Some((provider, model)) = glob.split_once('/') else {
                    return Err(at(
                        "model",
                        format!("'{glob}' is not a model spec (<provider>/<model>, `*` for any run of characters)"),
                    ));
                };
                if glob.len() > MAX_GLOB || model.is_empty() {
                    return Err(at("model", format!("'{glob}' is not a model spec")));
                }
                if !provider.contains('*') && !known(provider) {
                    return Err(at("model", format!("unknown provider '{provider}'")));
                }
                Scope::Model(glob.to_string())
            }
            (None, Some(name)) => {
                let name = name.trim();
                if !known(name) {
                    return Err(at("provider", format!("unknown provider '{name}'")));
                }
                Scope::Provider(name.to_string())
            }
            // Refused as the file is read.
            (None, None) => continue,
        };
        entries.push((scope, windows(&entry.rates)));
    }
    for (name, provider) in providers {
        if let Some(limits) = &provider.limits {
            entries.push((Scope::Provider(name.clone()), windows(&limits.0)));
        }
    }
    Ok(DeclaredLimits { entries })
}

/// Whether `text` matches `glob`, where `*` matches any run of characters
/// (none included): the greedy two-pointer walk, O(glob × text) at worst.
fn glob_matches(glob: &str, text: &str) -> bool {
    let (g, t) = (glob.as_bytes(), text.as_bytes());
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ti));
            gi += 1;
        } else if gi < g.len() && g[gi] == t[ti] {
            gi += 1;
            ti += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Per;

    #[test]
    fn globs_match_any_run_of_characters() {
        assert!(glob_matches(
            "bedrock/*",
            "bedrock/us.anthropic.claude-sonnet-4-5"
        ));
        assert!(glob_matches(
            "bedrock/us.anthropic.claude-sonnet-4-5-*",
            "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
        ));
        assert!(!glob_matches("bedrock/*", "vertex/gemini-2.5-pro"));
        assert!(glob_matches("*", "anything/at-all"));
        assert!(glob_matches("a*b*c", "aXXbYYc"));
        assert!(!glob_matches("a*b*c", "aXXbYY"));
        assert!(glob_matches("openai/gpt-5", "openai/gpt-5"));
        assert!(!glob_matches("openai/gpt-5", "openai/gpt-5-mini"));
        // Many stars over a long name stay cheap.
        let long = "x".repeat(10_000);
        assert!(!glob_matches(
            &"*x".repeat(200).replace("*x*x", "*x*y"),
            &long
        ));
    }

    fn entry(model: Option<&str>, provider: Option<&str>, requests: u64) -> LimitEntry {
        LimitEntry {
            model: model.map(str::to_string),
            provider: provider.map(str::to_string),
            rates: Rates {
                requests: Some(requests),
                per: Per::Minute,
                ..Rates::default()
            },
        }
    }

    #[test]
    fn every_matching_entry_applies_once() {
        let limits = resolve(
            Some(&[
                entry(Some("bedrock/*"), None, 24),
                entry(None, Some("bedrock"), 50),
                entry(Some("bedrock/*"), None, 24),
                entry(Some("openai/gpt-5"), None, 5),
            ]),
            &BTreeMap::new(),
        )
        .unwrap();
        let w = limits.windows("bedrock/us.anthropic.claude-sonnet-4-5");
        assert_eq!(w.iter().map(|w| w.limit).collect::<Vec<_>>(), [24, 50]);
        assert!(limits.windows("openai/gpt-5-mini").is_empty());
        assert_eq!(
            limits.windows("openai/gpt-5")[0].to_string(),
            "5 requests/min"
        );
    }

    #[test]
    fn unknown_providers_are_refused_naming_the_key() {
        let none = BTreeMap::new();
        let e = resolve(Some(&[entry(None, Some("bedrok"), 1)]), &none).unwrap_err();
        assert_eq!(e.0, "config limits[0].provider: unknown provider 'bedrok'");
        let e = resolve(Some(&[entry(Some("nope/*"), None, 1)]), &none).unwrap_err();
        assert_eq!(e.0, "config limits[0].model: unknown provider 'nope'");
        let e = resolve(Some(&[entry(Some("gpt-5"), None, 1)]), &none).unwrap_err();
        assert!(
            e.0.starts_with("config limits[0].model: 'gpt-5' is not"),
            "{e}"
        );
    }
}
