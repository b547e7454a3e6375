//! `--check` (SPEC section 15): every model of the configuration (the
//! primary, each fallback, `subagents.model` and its fallbacks) gets one
//! small streamed request offering one tool, all in parallel, and one
//! verdict line, then a failed line for a shared health record it cannot
//! use (SPEC 13), then one line per budget (SPEC 19) with what its current
//! period has spent. No retries, no switches, no tools run, no health
//! record written.

use std::time::Duration;

use serde_json::json;

use crate::budget;
use crate::cli::Cli;
use crate::events::jsonl::JsonlSink;
use crate::events::sqlite::SqliteSink;
use crate::events::{Emitter, Event, Sink};
use crate::health::{self, Health, Location};
use crate::model::attempt::{send_once, Accept, Attempted, Deadlines, Place};
use crate::model::gate::{BudgetBook, Standing};
use crate::model::member::Member;
use crate::model::registry::build_member;
use crate::model::spec::ResolvedModel;
use crate::model::{Message, NoObserver, Request, Role, ToolSpec};
use crate::reason::FailureReason;
use crate::settings::{gemini_key_source, load_config, Env, Settings, SetupError};

/// A probe's reply budget: enough for a short tool call, a fraction of a
/// cent on any priced model.
pub(crate) const PROBE_MAX_OUTPUT_TOKENS: u32 = 32;

const PROBE_SYSTEM: &str =
    "This is a connectivity check of a coding agent. Answer by calling the `ping` tool once.";
const PROBE_TASK: &str = "Call the ping tool.";

/// One model to probe, with the key to keep out of its messages.
pub(crate) struct Target {
    pub member: Member,
    secret: Option<String>,
    /// Where a cloud member's credentials were found (SPEC 22).
    credentials: Option<String>,
}

/// The verdict on one model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelVerdict {
    pub spec: String,
    /// `None` when the model answered; else the SPEC 4 reason.
    pub reason: Option<FailureReason>,
    /// The vendor's short message (or what went wrong), keys removed.
    pub message: Option<String>,
    pub first_event_ms: Option<u64>,
    /// Whether the reply called the offered tool (`None` on failure).
    pub tool_calls: Option<bool>,
    pub priced: bool,
    /// Where a cloud member's credentials were found (SPEC 22), never a value.
    pub credentials: Option<String>,
}

impl ModelVerdict {
    pub(crate) fn ok(&self) -> bool {
        self.reason.is_none()
    }

    /// `ok  <spec>  <ms> ms  tool calls: yes|no  price: known|unknown`, or
    /// `FAIL  <spec>  <reason>: <message>`.
    pub(crate) fn line(&self) -> String {
        let line = self.verdict_line();
        match &self.credentials {
            Some(source) => format!("{line}  credentials: {source}"),
            None => line,
        }
    }

    fn verdict_line(&self) -> String {
        match &self.reason {
            None => format!(
                "ok  {}  {} ms  tool calls: {}  price: {}",
                self.spec,
                self.first_event_ms.unwrap_or(0),
                if self.tool_calls == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                if self.priced { "known" } else { "unknown" }
            ),
            Some(reason) => match self.message.as_deref().filter(|m| !m.is_empty()) {
                Some(message) => format!("FAIL  {}  {reason}: {message}", self.spec),
                None => format!("FAIL  {}  {reason}", self.spec),
            },
        }
    }
}

/// The models of a configuration in probe order, each once.
pub(crate) fn models(settings: &Settings) -> Vec<&ResolvedModel> {
    let mut models: Vec<&ResolvedModel> = Vec::new();
    let sub = settings
        .subagents
        .iter()
        .flat_map(|s| std::iter::once(&s.primary).chain(&s.fallbacks));
    for model in settings.chain().chain(sub) {
        if !models.iter().any(|m| m.spec == model.spec) {
            models.push(model);
        }
    }
    models
}

/// Resolves the configuration as a run would (no task is read) and builds
/// every model to probe. Errors are setup errors (exit 2).
pub(crate) fn prepare(cli: &Cli, env: Env) -> Result<(Settings, Vec<Target>), SetupError> {
    let config = load_config(&cli.config, env)?;
    let providers = config.providers.clone();
    let settings = Settings::from_parts(cli, config, String::new(), env, None)?;
    let mut targets = Vec::new();
    for model in models(&settings) {
        let member = build_member(model, settings.retry.stream_timeouts())?;
        let secret = model.api_key.clone().filter(|k| !k.is_empty());
        let credentials = match &model.credentials {
            Some(found) => Some(found.0.source()),
            None => gemini_key_source(model, &providers, env),
        };
        targets.push(Target {
            member,
            secret,
            credentials,
        });
    }
    Ok((settings, targets))
}

/// Removes key material from a vendor message: the key itself, and any
/// `sk-...` token (OpenAI echoes a masked key in its 401 message).
fn scrub(message: &str, secret: Option<&str>) -> String {
    let mut text = message.to_string();
    if let Some(secret) = secret {
        text = text.replace(secret, "<redacted>");
    }
    text.split(' ')
        .map(|word| {
            if word.starts_with("sk-") && word.len() > 3 {
                "sk-<redacted>"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends one probe to `target` and judges it. `limit` cuts off a model
/// that never answers (the adapters enforce the first-event timeout; this
/// also bounds models without a stream, and a stream that stalls).
pub(crate) async fn probe(target: &Target, emitter: &Emitter, limit: Duration) -> ModelVerdict {
    let member = &target.member;
    let tools = [ToolSpec {
        name: "ping".into(),
        description: "Reports that the check reached the model. Call it once.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"note": {"type": "string", "description": "anything, or nothing"}},
        }),
    }];
    let messages = [Message::new(Role::User, PROBE_TASK.to_string(), 0)];
    let request = Request {
        system: PROBE_SYSTEM,
        messages: &messages,
        tools: &tools,
        output_schema: None,
        max_output_tokens: Some(PROBE_MAX_OUTPUT_TOKENS),
        reasoning_effort: None,
        spec: member.spec.as_str(),
        // A probe is far below any cache's minimum: nothing to ask.
        prompt_cache: crate::prompt_cache::PromptCache::Off,
        cache_key: None,
    };
    let place = Place {
        step: 0,
        attempt: 1,
    };
    let never = std::future::pending::<std::convert::Infallible>();
    let deadlines = Deadlines {
        first_event: None,
        whole: Some(limit),
    };
    let sent = match send_once(
        member,
        &request,
        &NoObserver,
        place,
        Accept::AnyReply,
        deadlines,
        never,
    )
    .await
    {
        Attempted::Sent(sent) => sent,
        Attempted::Cut(never, _) => match never {},
    };
    let record = sent.record;
    let (first_event_ms, duration_ms) = (record.first_event_ms, record.duration_ms);
    emitter.model_request(record);
    let spec = member.spec.to_string();
    match sent.result {
        Ok(response) => ModelVerdict {
            spec,
            reason: None,
            message: None,
            first_event_ms: Some(first_event_ms.unwrap_or(duration_ms)),
            tool_calls: Some(!response.tool_calls.is_empty()),
            priced: member.pricing.is_some() || response.cost_override.is_some(),
            credentials: target.credentials.clone(),
        },
        Err(error) => ModelVerdict {
            spec,
            reason: Some(error.reason()),
            message: Some(scrub(&error.message(), target.secret.as_deref())),
            first_event_ms,
            tool_calls: None,
            priced: member.pricing.is_some(),
            credentials: target.credentials.clone(),
        },
    }
}

/// Prints the verdict lines on stdout in human mode.
struct Lines;
impl Sink for Lines {
    fn handle(&mut self, record: &crate::events::EventRecord) {
        if let Event::CheckResult { line, .. }
        | Event::CheckHealth { line, .. }
        | Event::CheckBudget { line, .. }
        | Event::CheckLimit { line, .. } = &record.event
        {
            println!("{line}");
        }
    }
}

/// `--check` from the command line: the process exit code.
pub(crate) fn run(cli: &Cli, env: Env) -> i32 {
    let (settings, targets) = match prepare(cli, env) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            return crate::exit::USAGE;
        }
    };
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if settings.json {
        sinks.push(Box::new(JsonlSink::stdout()));
    } else {
        sinks.push(Box::new(Lines));
    }
    sinks.extend(crate::events::github::CheckSink::from_env(env));
    if let Some(path) = &settings.log_db {
        match SqliteSink::open(path) {
            Ok(db) => sinks.push(Box::new(db)),
            Err(e) => {
                eprintln!("tinyagent: error: {e}");
                return crate::exit::USAGE;
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinyagent: error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let emitter = Emitter::new(&uuid::Uuid::new_v4().to_string(), sinks);
    let limit = settings.retry.stream_first_event_timeout + settings.retry.stream_idle_timeout;
    let verdicts = runtime.block_on(futures::future::join_all(
        targets.iter().map(|t| probe(t, &emitter, limit)),
    ));
    let mut failed = verdicts.iter().filter(|v| !v.ok()).count() as u32;
    for v in &verdicts {
        emitter.emit(Event::CheckResult {
            model: v.spec.clone(),
            ok: v.ok(),
            reason: v.reason,
            message: v.message.clone(),
            first_event_ms: v.first_event_ms,
            tool_calls: v.tool_calls,
            priced: v.priced,
            credentials: v.credentials.clone(),
            line: v.line(),
        });
    }
    for event in limit_events(&settings) {
        emitter.emit(event);
    }
    // Budgets are read from the record: none to show when it is unusable.
    match record_failure(&settings) {
        Some(event) => {
            failed += 1;
            emitter.emit(event);
        }
        None => {
            for event in budget_events(&settings, &emitter) {
                emitter.emit(event);
            }
        }
    }
    emitter.emit(Event::CheckFinished {
        ok: failed == 0,
        failed,
    });
    emitter.finish();
    if failed == 0 {
        0
    } else {
        1
    }
}

/// `budget  <usd> per <period> [<model or provider>]  <spent> spent  resets <RFC 3339 time>`.
pub(crate) fn budget_line(s: &Standing) -> String {
    let target = s
        .budget
        .target()
        .map(|t| format!("  {t}"))
        .unwrap_or_default();
    format!(
        "budget  {} per {}{target}  {} spent  resets {}",
        s.budget.usd,
        s.budget.per,
        plain_usd(s.spent),
        budget::rfc3339(s.resets_at)
    )
}

/// A spend in USD with 2 to 4 decimals (`12.34`, `0.0042`, `0.00`).
fn plain_usd(nanos: budget::Nanos) -> String {
    let text = format!("{:.4}", budget::usd(nanos));
    let trimmed = text.trim_end_matches('0');
    match trimmed.split_once('.') {
        Some((_, decimals)) if decimals.len() >= 2 => trimmed.to_string(),
        _ => format!("{:.2}", budget::usd(nanos)),
    }
}

/// The shared health record, opened as a run opens it and nothing written:
/// a Redis that cannot be reached or a file that cannot be used is a failed
/// check (a run would go on without it, with a warning). A file not made
/// yet is no failure, and is not created.
fn record_failure(settings: &Settings) -> Option<Event> {
    let location = settings.health_db.as_ref()?;
    if matches!(location, Location::File(path) if !path.exists()) {
        return None;
    }
    let error = location.read_records(&[]).err()?;
    let label = location.label();
    Some(Event::CheckHealth {
        line: format!("FAIL  health_db {label}  {error}"),
        health_db: label,
        ok: false,
        message: error.to_string(),
    })
}

/// `limit  <spec>  <N> <what>/<period>  <declared|learned>`: each model's
/// rate limits and where they came from (SPEC 24).
fn limit_events(settings: &Settings) -> Vec<Event> {
    let models: Vec<(String, crate::health::PaceKey)> = models(settings)
        .into_iter()
        .map(|m| (m.spec.to_string(), m.pace_key()))
        .collect();
    let listed =
        crate::settings::listed_limits(&settings.rate_limits, &models, settings.health_db.as_ref());
    models
        .iter()
        .zip(listed)
        .flat_map(|((spec, _), limits)| {
            limits.into_iter().map(move |l| Event::CheckLimit {
                model: spec.clone(),
                line: format!("limit  {spec}  {}  {}", l.limit, l.source),
                limit: l.limit,
                source: l.source.to_string(),
            })
        })
        .collect()
}

/// One `check.budget` per configured budget, read from the shared record
/// (a file that does not exist yet is not created: nothing was spent).
fn budget_events(settings: &Settings, emitter: &Emitter) -> Vec<Event> {
    if settings.budgets.is_empty() {
        return Vec::new();
    }
    let health = match &settings.health_db {
        Some(Location::File(path)) if !path.exists() => Health::off(),
        location => health::for_run(location.as_ref(), emitter),
    };
    let book = BudgetBook::new(settings.budgets.clone(), health);
    book.read()
        .standings()
        .iter()
        .map(|s| Event::CheckBudget {
            usd: s.budget.usd,
            per: s.budget.per.to_string(),
            model: match &s.budget.scope {
                budget::Scope::Model(spec) => Some(spec.clone()),
                _ => None,
            },
            provider: match &s.budget.scope {
                budget::Scope::Provider(name) => Some(name.clone()),
                _ => None,
            },
            spent_usd: budget::usd(s.spent),
            exhausted: s.is_spent(),
            resets_at: budget::rfc3339(s.resets_at),
            line: budget_line(s),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict() -> ModelVerdict {
        ModelVerdict {
            spec: "openai/gpt-5".into(),
            reason: None,
            message: None,
            first_event_ms: Some(412),
            tool_calls: Some(true),
            priced: true,
            credentials: None,
        }
    }

    #[test]
    fn a_cloud_member_says_where_its_credentials_were_found() {
        let v = ModelVerdict {
            spec: "bedrock/m".into(),
            credentials: Some("environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)".into()),
            ..verdict()
        };
        assert_eq!(
            v.line(),
            "ok  bedrock/m  412 ms  tool calls: yes  price: known  credentials: environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
        );
    }

    #[test]
    fn lines_match_spec() {
        assert_eq!(
            verdict().line(),
            "ok  openai/gpt-5  412 ms  tool calls: yes  price: known"
        );
        let v = ModelVerdict {
            tool_calls: Some(false),
            priced: false,
            ..verdict()
        };
        assert_eq!(
            v.line(),
            "ok  openai/gpt-5  412 ms  tool calls: no  price: unknown"
        );
        let v = ModelVerdict {
            reason: Some(FailureReason::Http(401)),
            message: Some("Incorrect API key provided".into()),
            ..verdict()
        };
        assert_eq!(
            v.line(),
            "FAIL  openai/gpt-5  http_401: Incorrect API key provided"
        );
    }

    #[test]
    fn budget_lines_match_spec() {
        use crate::budget::{Budget, Period, Scope};
        let s = |usd, scope, spent| Standing {
            budget: Budget {
                usd,
                per: Period::Day,
                scope,
            },
            spent: budget::nanos(spent),
            resets_at: 1_796_169_600_000,
        };
        assert_eq!(
            budget_line(&s(50.0, Scope::Fleet, 12.34)),
            "budget  50 per day  12.34 spent  resets 2026-12-02T00:00:00Z"
        );
        assert_eq!(
            budget_line(&s(10.0, Scope::Model("anthropic/claude-opus-4-1".into()), 0.0042)),
            "budget  10 per day  anthropic/claude-opus-4-1  0.0042 spent  resets 2026-12-02T00:00:00Z"
        );
        assert_eq!(
            budget_line(&s(2.5, Scope::Provider("openai".into()), 0.0)),
            "budget  2.5 per day  openai  0.00 spent  resets 2026-12-02T00:00:00Z"
        );
    }

    #[test]
    fn keys_are_scrubbed_from_vendor_messages() {
        let text = scrub(
            "Incorrect API key provided: sk-proj-abc*****wxyz. You can find your key at x",
            None,
        );
        assert_eq!(
            text,
            "Incorrect API key provided: sk-<redacted> You can find your key at x"
        );
        assert_eq!(
            scrub("bad key mykey123456", Some("mykey123456")),
            "bad key <redacted>"
        );
    }
}
