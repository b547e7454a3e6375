//! The YAML config file types (SPEC section 3), strict: an unknown key
//! anywhere is an error naming the key and the file. Loading and layering
//! live here too; defaults and precedence live in `settings/`. Durations
//! are read as `Duration` here (`duration::deserialize`). It imports only
//! leaf modules (vocabulary that imports nothing of ours).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_yaml::Value;

mod rate_limits;

#[cfg(test)]
pub(crate) use rate_limits::Per;
pub(crate) use rate_limits::{LimitEntry, ProviderLimits, Rates};

use crate::budget::Period;
use crate::duration;
use crate::policy::{Cooldown, HedgeAfter};
use crate::prompt_cache::PromptCache;
use crate::wire_api::{ToolChoice, WireApi, API_NAMES};

/// A `fallback_models` entry: a spec, or a mapping `{model: SPEC,
/// max_output_tokens: N}` that also sets that member's reply budget (SPEC 4
/// "Reply caps per member"). A mapping is strict like every other key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FallbackEntry {
    pub model: String,
    pub max_output_tokens: Option<u32>,
    /// `prompt_cache:` for this member alone (SPEC 25).
    pub prompt_cache: Option<PromptCache>,
}

impl From<String> for FallbackEntry {
    fn from(model: String) -> Self {
        FallbackEntry {
            model,
            max_output_tokens: None,
            prompt_cache: None,
        }
    }
}

impl From<&str> for FallbackEntry {
    fn from(model: &str) -> Self {
        FallbackEntry::from(model.to_string())
    }
}

impl<'de> Deserialize<'de> for FallbackEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The mapping form, with its own unknown-key errors.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Mapping {
            model: String,
            max_output_tokens: Option<u32>,
            prompt_cache: Option<PromptCache>,
        }
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = FallbackEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a model spec, or {model: SPEC, max_output_tokens: N, prompt_cache: on|off|1h}",
                )
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FallbackEntry, E> {
                Ok(FallbackEntry::from(text.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<FallbackEntry, A::Error> {
                let m = Mapping::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(FallbackEntry {
                    model: m.model,
                    max_output_tokens: m.max_output_tokens,
                    prompt_cache: m.prompt_cache,
                })
            }
        }
        d.deserialize_any(Entry)
    }
}

/// The whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    pub model: Option<String>,
    pub fallback_models: Option<Vec<FallbackEntry>>,
    pub step_limit: Option<u32>,
    pub cost_limit: Option<f64>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub time_limit: Option<Duration>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub fallback: FallbackConfig,
    pub subagents: Option<SubagentsConfig>,
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    #[serde(default)]
    pub hooks: HooksConfig,
    pub sandbox_allowed_domains: Option<Vec<String>>,
    pub health_db: Option<String>,
    /// `pacing: on` (the default) or `off` (SPEC 17).
    pub pacing: Option<Pacing>,
    /// `save_runs: false` keeps runs out of the run store (SPEC section 7).
    pub save_runs: Option<bool>,
    #[serde(default)]
    pub compaction: CompactionConfig,
    /// `instructions:` true (the default), false, or a file (SPEC 14).
    pub instructions: Option<InstructionsConfig>,
    /// `tools: {allow, deny}`: which tools are offered (SPEC 11).
    #[serde(default)]
    pub tools: ToolsConfig,
    /// How long to wait for a model when every one is down (SPEC 18).
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub outage_wait: Option<Duration>,
    /// `budgets:` spend caps shared by every run on the health record (SPEC 19).
    pub budgets: Option<Vec<BudgetConfig>>,
    /// `approval: ask | edits | auto` (SPEC 20).
    pub approval: Option<crate::approval_config::Mode>,
    /// Command prefixes that run without asking (SPEC 20).
    pub approval_allow: Option<Vec<crate::approval_config::AllowPrefix>>,
    /// `prompt_cache: on | off | 1h` for every member (SPEC 25).
    pub prompt_cache: Option<PromptCache>,
    /// `limits:` rate limits for providers that publish none (SPEC 24).
    pub limits: Option<Vec<LimitEntry>>,
}

/// One entry of `budgets:`: `{usd: AMOUNT, per: PERIOD}` with `model` or
/// `provider` (not both). Checked here, so a mistake names its file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawBudget")]
pub(crate) struct BudgetConfig {
    pub(crate) usd: f64,
    pub(crate) per: Period,
    pub(crate) model: Option<String>,
    pub(crate) provider: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    usd: Usd,
    per: Period,
    model: Option<String>,
    provider: Option<String>,
}

/// A budget entry with both `model` and `provider`.
#[derive(Debug, thiserror::Error)]
#[error("give `model` or `provider`, not both (one budget each)")]
pub(crate) struct BothScopes;

impl TryFrom<RawBudget> for BudgetConfig {
    type Error = BothScopes;
    fn try_from(raw: RawBudget) -> Result<Self, BothScopes> {
        if raw.model.is_some() && raw.provider.is_some() {
            return Err(BothScopes);
        }
        Ok(BudgetConfig {
            usd: raw.usd.0,
            per: raw.per,
            model: raw.model,
            provider: raw.provider,
        })
    }
}

/// A count of tries (`attempts`, `rate_limit_attempts`, `switch_after`): a
/// whole number of at least 1 (SPEC 3); a fraction or a negative already
/// fails as a `u32`, and 0 fails here, so the error names key and file.
fn at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<u32>::deserialize(d)? {
        Some(0) => Err(serde::de::Error::custom(
            "must be a whole number of at least 1, got 0",
        )),
        n => Ok(n),
    }
}

/// An amount of USD: a finite number, 0 or more.
struct Usd(f64);

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let amount = f64::deserialize(d)?;
        if amount.is_finite() && amount >= 0.0 {
            Ok(Usd(amount))
        } else {
            Err(serde::de::Error::custom(format!(
                "the amount must be a number of USD, 0 or more, got {amount}"
            )))
        }
    }
}

/// `pacing:` stay under providers' published rate limits, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pacing {
    On,
    Off,
}

impl<'de> Deserialize<'de> for Pacing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if s == "on" => Ok(Pacing::On),
            Value::String(s) if s == "off" => Ok(Pacing::Off),
            other => {
                let found = match other {
                    Value::String(s) => format!("'{s}'"),
                    Value::Bool(b) => b.to_string(),
                    other => format!("{other:?}"),
                };
                Err(serde::de::Error::custom(format!(
                    "expected on or off, found {found}"
                )))
            }
        }
    }
}

/// `tools:` tool names or globs (`mcp__docs__*`) to offer, or not.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsConfig {
    /// Only these (when given); `submit` is always offered.
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `instructions:` read the `AGENTS.md` files (true), none (false), or
/// this file instead.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum InstructionsConfig {
    Enabled(bool),
    File(PathBuf),
}

/// A named provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConfig {
    pub api: WireApi,
    /// Required but for the clouds' APIs (SPEC 22), which know their own.
    #[serde(default)]
    pub endpoint: String,
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from environment variables
    /// (`{X-Team-Token: TEAM_TOKEN_VAR}`); one whose variable is unset or
    /// empty is not sent.
    #[serde(default)]
    pub env_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// `false`: ask for one JSON body instead of a stream (servers that
    /// cannot stream tool calls, like llama-cpp-python).
    pub stream: Option<bool>,
    /// Sent with every request that offers tools.
    pub tool_choice: Option<ToolChoice>,
    /// A cloud's region (`api: bedrock`: in place of `AWS_REGION`).
    pub region: Option<String>,
    /// The AWS profile (`api: bedrock`: in place of `AWS_PROFILE`).
    pub profile: Option<String>,
    /// The Google Cloud project (`api: vertex`: in place of `GOOGLE_CLOUD_PROJECT`).
    pub project: Option<String>,
    /// Azure OpenAI's `api-version` (`api: azure`: in place of
    /// `AZURE_OPENAI_API_VERSION`): the classic deployment URL.
    pub api_version: Option<String>,
    /// Rate limits for each of its models (SPEC 24).
    pub limits: Option<ProviderLimits>,
}

/// Per-model metadata of a named provider.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelConfig {
    pub input_price: Option<f64>,
    pub output_price: Option<f64>,
    pub cached_input_price: Option<f64>,
    /// USD per million input tokens written to a prompt cache with the
    /// default lifetime (SPEC 25); a one-hour write costs 1.6 times it.
    pub cache_write_price: Option<f64>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    /// `prompt_cache:` for this model of the provider (SPEC 25).
    pub prompt_cache: Option<PromptCache>,
}

/// `retry:`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryConfig {
    #[serde(default, deserialize_with = "at_least_one")]
    pub attempts: Option<u32>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub backoff: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub max_backoff: Option<Duration>,
    pub jitter: Option<f64>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub stream_first_event_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub stream_idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "at_least_one")]
    pub rate_limit_attempts: Option<u32>,
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub rate_limit_budget: Option<Duration>,
}

/// `fallback:`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FallbackConfig {
    #[serde(default, deserialize_with = "at_least_one")]
    pub switch_after: Option<u32>,
    /// A duration, or `never`.
    #[serde(default, deserialize_with = "cooldown")]
    pub cooldown: Option<Cooldown>,
    /// A duration, `auto` or `off` (SPEC 23).
    #[serde(default, deserialize_with = "hedge_after")]
    pub hedge_after: Option<HedgeAfter>,
    /// A percentage, `0%` to `100%`, as a share (0 to 1).
    #[serde(default, deserialize_with = "hedge_budget")]
    pub hedge_budget: Option<f64>,
}

/// `subagents:`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubagentsConfig {
    pub model: Option<String>,
    pub step_limit: Option<u32>,
    pub fallback_models: Option<Vec<FallbackEntry>>,
}

/// `compaction:` (an extension of SPEC section 3): when to compact the
/// history before a request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompactionConfig {
    /// Share of the context window (0 < x <= 1) past which the history is
    /// compacted before a request (default 0.8).
    pub threshold: Option<f64>,
    /// The context window, in tokens, assumed for models whose window is not
    /// known (built-in providers and scripted models).
    pub default_context_window: Option<u64>,
}

/// One MCP server started over stdio.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables for the server: name -> the name of a variable of ours to copy.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// How long one tool call may wait for its answer (default 10m).
    #[serde(default, deserialize_with = "duration::deserialize")]
    pub tool_timeout: Option<Duration>,
}

/// `hooks:`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HooksConfig {
    #[serde(default)]
    pub stop: Vec<HookCommand>,
    #[serde(default)]
    pub pre_tool: Vec<HookCommand>,
    #[serde(default)]
    pub post_tool: Vec<HookCommand>,
}

/// One hook command.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HookCommand {
    pub command: String,
}

/// Config `api:`: an unknown value is an error naming the accepted ones
/// (the config loader adds the key path and the file).
impl<'de> Deserialize<'de> for WireApi {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        WireApi::from_config(&name).ok_or_else(|| {
            let hint = crate::suggest::closest(&name, API_NAMES.iter().copied())
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            let (last, rest) = API_NAMES.split_last().unwrap_or((&"", &[]));
            serde::de::Error::custom(format!(
                "unknown API '{name}' ({hint}expected {} or {last})",
                rest.join(", ")
            ))
        })
    }
}

/// `fallback.cooldown`: a duration, or `never`.
fn cooldown<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cooldown>, D::Error> {
    use serde::de::Visitor;
    struct CooldownVisitor;
    impl Visitor<'_> for CooldownVisitor {
        type Value = Cooldown;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a duration such as 5m, or never")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Cooldown, E> {
            if text == "never" {
                return Ok(Cooldown::Never);
            }
            duration::DurationVisitor.visit_str(text).map(Cooldown::For)
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Cooldown, E> {
            self.visit_str(&n.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Cooldown, E> {
            self.visit_str(&n.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Cooldown, E> {
            self.visit_str(&n.to_string())
        }
    }
    d.deserialize_any(CooldownVisitor).map(Some)
}

/// The shortest `hedge_after` accepted: sooner hedges nearly every request.
pub(crate) const MIN_HEDGE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// A `fallback.hedge_after` or `--hedge-after` value that is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HedgeAfterError {
    #[error("'{0}' is not a duration: give a duration of at least 100ms such as 2s, auto or off")]
    NotADuration(String),
    #[error("'{0}' is too soon: give a duration of at least 100ms such as 2s, auto or off")]
    TooSoon(String),
}

/// `fallback.hedge_after` or `--hedge-after`: a duration of at least
/// `MIN_HEDGE_AFTER`, `auto` or `off`.
pub(crate) fn parse_hedge_after(text: &str) -> Result<HedgeAfter, HedgeAfterError> {
    match text.trim() {
        "off" => Ok(HedgeAfter::Off),
        "auto" => Ok(HedgeAfter::Auto),
        other => match duration::parse(other) {
            Ok(after) if after >= MIN_HEDGE_AFTER => Ok(HedgeAfter::After(after)),
            Ok(_) => Err(HedgeAfterError::TooSoon(other.to_string())),
            Err(_) => Err(HedgeAfterError::NotADuration(other.to_string())),
        },
    }
}

fn hedge_after<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HedgeAfter>, D::Error> {
    let text = match Value::deserialize(d)? {
        Value::String(text) => text,
        Value::Number(n) => n.to_string(),
        // YAML 1.1 reads a bare `off` as false.
        Value::Bool(false) => "off".to_string(),
        _ => {
            return Err(serde::de::Error::custom(
                "give a duration of at least 100ms such as 2s, auto or off",
            ))
        }
    };
    parse_hedge_after(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `fallback.hedge_budget`: a percentage from `0%` to `100%`.
fn hedge_budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let text = match Value::deserialize(d)? {
        Value::String(text) => text,
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    let share = text
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|n| n.is_finite() && (0.0..=100.0).contains(n));
    match share {
        Some(percent) => Ok(Some(percent / 100.0)),
        None => Err(serde::de::Error::custom(format!(
            "expected a percentage from 0% to 100% such as 10%, got '{text}'"
        ))),
    }
}

pub(crate) mod locate;
mod read;

pub(crate) use read::{check, overlay, read_layer, user_config_path};

#[cfg(test)]
mod tests;
