//! `--check` (SPEC section 15): every model of the configuration (the
//! primary, each fallback, `subagents.model` and its fallbacks) gets one
//! small streamed request offering one tool, all in parallel, and one
//! verdict line. No retries, no switches, no tools run, no health record.

use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::cli::Cli;
use crate::events::jsonl::JsonlSink;
use crate::events::sqlite::SqliteSink;
use crate::events::{Emitter, Event, RequestRecord, Sink};
use crate::model::chain::Member;
use crate::model::http::watch_first_event;
use crate::model::registry::build_member;
use crate::model::spec::ResolvedModel;
use crate::model::{Message, ModelError, NoObserver, Request, Response, Role, ToolSpec};
use crate::settings::{load_config, Env, Settings, SetupError};

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
}

/// The verdict on one model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub spec: String,
    /// `None` when the model answered; else the SPEC 4 reason.
    pub reason: Option<String>,
    /// The vendor's short message (or what went wrong), keys removed.
    pub message: Option<String>,
    pub first_event_ms: Option<u64>,
    /// Whether the reply called the offered tool (`None` on failure).
    pub tool_calls: Option<bool>,
    pub priced: bool,
}

impl Verdict {
    pub(crate) fn ok(&self) -> bool {
        self.reason.is_none()
    }

    /// `ok  <spec>  <ms> ms  tool calls: yes|no  price: known|unknown`, or
    /// `FAIL  <spec>  <reason>: <message>`.
    pub(crate) fn line(&self) -> String {
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
    let settings = Settings::from_parts(cli, config, String::new(), env, None)?;
    let mut targets = Vec::new();
    for model in models(&settings) {
        let member = build_member(model, settings.retry.stream_timeouts())?;
        let secret = model.api_key.clone().filter(|k| !k.is_empty());
        targets.push(Target { member, secret });
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

/// What a failure says beyond its reason: the vendor's short message, or
/// the error's own words.
fn failure_message(error: &ModelError) -> String {
    match error {
        ModelError::Status {
            status, message, ..
        } => {
            let hint = if *status == 404 {
                " (hint: the model name may be wrong)"
            } else {
                ""
            };
            let text = if message.is_empty() {
                format!("HTTP {status}")
            } else {
                message.clone()
            };
            format!("{text}{hint}")
        }
        ModelError::Quota { message, .. }
        | ModelError::ContextOverflow { message }
        | ModelError::Network { message }
        | ModelError::Timeout { message }
        | ModelError::Invalid { message } => message.clone(),
        other => other.to_string(),
    }
}

/// Sends one probe to `target` and judges it. `limit` cuts off a model
/// that never answers (the adapters enforce the first-event timeout; this
/// also bounds models without a stream, and a stream that stalls).
pub(crate) async fn probe(target: &Target, emitter: &Emitter, limit: Duration) -> Verdict {
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
        spec: &member.spec,
    };
    let started = Instant::now();
    let started_at = SystemTime::now();
    let sent = tokio::time::timeout(
        limit,
        watch_first_event(member.model.complete(&request, &NoObserver)),
    )
    .await;
    let (result, first) = match sent {
        Ok((result, first)) => (result, first),
        Err(_) => (
            Err(ModelError::Timeout {
                message: format!("no answer within {}", humantime::format_duration(limit)),
            }),
            None,
        ),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let first_event_ms = first.map(|t| t.saturating_duration_since(started).as_millis() as u64);
    record(
        emitter,
        member,
        started_at,
        first_event_ms,
        duration_ms,
        &result,
    );
    let secret = target.secret.as_deref();
    match result {
        Ok(response) => Verdict {
            spec: member.spec.clone(),
            reason: None,
            message: None,
            first_event_ms: Some(first_event_ms.unwrap_or(duration_ms)),
            tool_calls: Some(!response.tool_calls.is_empty()),
            priced: member.pricing.is_some() || response.cost_override.is_some(),
        },
        Err(error) => Verdict {
            spec: member.spec.clone(),
            reason: Some(error.reason()),
            message: Some(scrub(&failure_message(&error), secret)),
            first_event_ms,
            tool_calls: None,
            priced: member.pricing.is_some(),
        },
    }
}

/// The probe's `model_requests` row (step 0), when `--log-db` is given.
fn record(
    emitter: &Emitter,
    member: &Member,
    started_at: SystemTime,
    first_event_ms: Option<u64>,
    duration_ms: u64,
    result: &Result<Response, ModelError>,
) {
    let (outcome, http_status, input, output, cost) = match result {
        Ok(r) => (
            "ok".to_string(),
            None,
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.cost_override
                .unwrap_or_else(|| member.pricing.map(|p| p.cost(&r.usage)).unwrap_or(0.0)),
        ),
        Err(e) => {
            let status = match e {
                ModelError::Status { status, .. } | ModelError::Quota { status, .. } => {
                    Some(*status)
                }
                _ => None,
            };
            (e.reason(), status, 0, 0, 0.0)
        }
    };
    emitter.model_request(RequestRecord {
        step: 0,
        model: member.spec.clone(),
        provider: member.provider.clone(),
        endpoint: member.endpoint.clone(),
        attempt: 1,
        started_at: humantime::format_rfc3339_millis(started_at).to_string(),
        first_event_ms,
        duration_ms,
        outcome,
        http_status,
        input_tokens: input,
        output_tokens: output,
        cost_usd: cost,
        response_model: None,
    });
}

/// Prints the verdict lines on stdout in human mode.
struct Lines;
impl Sink for Lines {
    fn handle(&mut self, record: &crate::events::EventRecord) {
        if let Event::CheckResult { line, .. } = &record.event {
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
    let failed = verdicts.iter().filter(|v| !v.ok()).count() as u32;
    for v in &verdicts {
        emitter.emit(Event::CheckResult {
            model: v.spec.clone(),
            ok: v.ok(),
            reason: v.reason.clone(),
            message: v.message.clone(),
            first_event_ms: v.first_event_ms,
            tool_calls: v.tool_calls,
            priced: v.priced,
            line: v.line(),
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict() -> Verdict {
        Verdict {
            spec: "openai/gpt-5".into(),
            reason: None,
            message: None,
            first_event_ms: Some(412),
            tool_calls: Some(true),
            priced: true,
        }
    }

    #[test]
    fn lines_match_spec() {
        assert_eq!(
            verdict().line(),
            "ok  openai/gpt-5  412 ms  tool calls: yes  price: known"
        );
        let v = Verdict {
            tool_calls: Some(false),
            priced: false,
            ..verdict()
        };
        assert_eq!(
            v.line(),
            "ok  openai/gpt-5  412 ms  tool calls: no  price: unknown"
        );
        let v = Verdict {
            reason: Some("http_401".into()),
            message: Some("Incorrect API key provided".into()),
            ..verdict()
        };
        assert_eq!(
            v.line(),
            "FAIL  openai/gpt-5  http_401: Incorrect API key provided"
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
