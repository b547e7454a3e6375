//! The offline scripted model (`script/<file>`, SPEC section 10): a YAML list
//! of replies used one per request, the last repeating.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use super::error::classify_status;
use super::wire::parse_arguments;
use super::{FinishReason, Model, ModelError, Request, Response, StreamObserver, ToolCall, Usage};

/// One scripted reply as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptReply {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptToolCall>,
    #[serde(default)]
    usage: Option<ScriptUsage>,
    #[serde(default)]
    finish: Option<String>,
    #[serde(default)]
    error: Option<ScriptError>,
    /// Use this reply this many times in a row.
    #[serde(default)]
    repeat: Option<usize>,
    /// Extension: the reply's cost in USD, overriding the price table.
    #[serde(default)]
    cost: Option<f64>,
    /// Extension: wait this long before answering (e.g. `2s`).
    #[serde(default)]
    delay: Option<String>,
    /// A refusal carrying this text (SPEC 10).
    #[serde(default)]
    refusal: Option<String>,
    /// Extension: the reply reports no token usage (as llama-cpp-python's
    /// streams do), so the run estimates it.
    #[serde(default)]
    no_usage: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptToolCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    /// An object; a string is read as raw JSON text (garbled when invalid).
    #[serde(default)]
    arguments: Option<serde_yaml::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptUsage {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
    #[serde(default)]
    cached_input: u64,
    /// Tokens written to a prompt cache (a part of `input`).
    #[serde(default)]
    cache_write: u64,
    /// The one-hour share of `cache_write`.
    #[serde(default)]
    cache_write_1h: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptError {
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    retry_after: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

/// A scripted model: replies in file order, one per request.
#[derive(Debug)]
pub(crate) struct ScriptModel {
    replies: Vec<ScriptReply>,
    next: AtomicUsize,
}

/// A script file that cannot be used; the message names the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScriptFileError {
    #[error("cannot read script {}: {error}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("invalid script {}: {problem}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        problem: ScriptProblem,
    },
}

/// What is wrong with a script's text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScriptProblem {
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    #[error("reply {reply}: unknown error kind '{kind}'")]
    UnknownKind { reply: usize, kind: String },
    #[error("reply {reply}: error needs a status or a kind")]
    ErrorWithoutCause { reply: usize },
    #[error("reply {reply}: delay: {error}")]
    Delay {
        reply: usize,
        error: crate::duration::DurationError,
    },
    #[error("the script has no replies")]
    Empty,
}

impl ScriptModel {
    /// Reads and checks a script file; the error names the file.
    pub(crate) fn load(path: &Path) -> Result<ScriptModel, ScriptFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScriptFileError::Unreadable {
            path: path.to_path_buf(),
            error: e,
        })?;
        Self::parse(&text).map_err(|problem| ScriptFileError::Invalid {
            path: path.to_path_buf(),
            problem,
        })
    }

    /// Whether some reply states its own `cost:` (then the model is priced).
    pub(crate) fn states_costs(&self) -> bool {
        self.replies.iter().any(|r| r.cost.is_some())
    }

    /// Reads a script from its YAML text.
    pub(crate) fn parse(text: &str) -> Result<ScriptModel, ScriptProblem> {
        let raw: Vec<ScriptReply> = serde_yaml::from_str(text)?;
        let mut replies = Vec::new();
        for (i, reply) in raw.into_iter().enumerate() {
            if let Some(kind) = reply.error.as_ref().and_then(|e| e.kind.as_deref()) {
                if !matches!(
                    kind,
                    "quota"
                        | "network"
                        | "timeout"
                        | "context_overflow"
                        | "stream_incomplete"
                        | "empty_response"
                ) {
                    return Err(ScriptProblem::UnknownKind {
                        reply: i + 1,
                        kind: kind.to_string(),
                    });
                }
            }
            if let Some(err) = &reply.error {
                if err.status.is_none() && err.kind.is_none() {
                    return Err(ScriptProblem::ErrorWithoutCause { reply: i + 1 });
                }
            }
            if let Some(delay) = &reply.delay {
                crate::duration::parse(delay).map_err(|error| ScriptProblem::Delay {
                    reply: i + 1,
                    error,
                })?;
            }
            let count = reply.repeat.unwrap_or(1).max(1);
            for _ in 0..count {
                replies.push(reply.clone());
            }
        }
        if replies.is_empty() {
            return Err(ScriptProblem::Empty);
        }
        Ok(ScriptModel {
            replies,
            next: AtomicUsize::new(0),
        })
    }

    fn take(&self) -> &ScriptReply {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.replies[i.min(self.replies.len() - 1)]
    }
}

/// The scripted failure, or `None` for `kind: empty_response`: a reply that
/// ends properly with nothing in it (the retry loop decides what that is).
fn scripted_error(error: &ScriptError) -> Option<ModelError> {
    let message = error.message.clone().unwrap_or_default();
    let retry_after = error.retry_after.and_then(super::http::seconds);
    Some(match error.kind.as_deref() {
        Some("empty_response") => return None,
        Some("quota") => ModelError::Quota {
            status: error.status.unwrap_or(429),
            message,
        },
        Some("network") => ModelError::Network { message },
        Some("timeout") => ModelError::Timeout {
            message,
            deadline: None,
        },
        Some("context_overflow") => ModelError::ContextOverflow { message },
        Some("stream_incomplete") => ModelError::StreamIncomplete,
        _ => classify_status(error.status.unwrap_or(500), None, &message, retry_after),
    })
}

fn tool_call(call: &ScriptToolCall, index: usize, serial: usize) -> ToolCall {
    let id = call
        .id
        .clone()
        .unwrap_or_else(|| format!("call_{serial}_{}", index + 1));
    let (arguments, garbled) = match &call.arguments {
        None => (Value::Object(Default::default()), false),
        Some(serde_yaml::Value::String(raw)) => parse_arguments(raw.clone()),
        Some(other) => (serde_json::to_value(other).unwrap_or(Value::Null), false),
    };
    ToolCall {
        id,
        name: call.name.clone(),
        arguments,
        garbled,
        oversized: None,
    }
}

/// A rough token estimate for replies that give no usage.
fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

#[async_trait]
impl Model for ScriptModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let serial = self.next.load(Ordering::Relaxed) + 1;
        let reply = self.take();
        if let Some(delay) = reply
            .delay
            .as_deref()
            .and_then(|d| crate::duration::parse(d).ok())
        {
            tokio::time::sleep(delay).await;
        }
        if reply.error.is_none() || reply.text.as_deref().is_some_and(|t| !t.is_empty()) {
            // A scripted reply "streams" at once: its first event is now.
            super::watch::note_first_event();
        }
        if let Some(text) = &reply.text {
            if !text.is_empty() {
                observer.text_delta(text);
            }
        }
        if let Some(text) = &reply.refusal {
            return Err(ModelError::Refusal { text: text.clone() });
        }
        if let Some(error) = &reply.error {
            match scripted_error(error) {
                Some(error) => return Err(error),
                None => {
                    return Ok(Response {
                        text: String::new(),
                        tool_calls: Vec::new(),
                        usage: Usage::default(),
                        usage_reported: true,
                        finish: FinishReason::Stop,
                        extra: None,
                        cost_override: reply.cost,
                        model: None,
                    })
                }
            }
        }
        let tool_calls: Vec<ToolCall> = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| tool_call(c, i, serial))
            .collect();
        let text = reply.text.clone().unwrap_or_default();
        let finish = match reply.finish.as_deref() {
            Some("length") => FinishReason::Length,
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        let usage = match &reply.usage {
            Some(u) => Usage {
                input_tokens: u.input,
                output_tokens: u.output,
                cached_input_tokens: u.cached_input,
                cache_write_tokens: u.cache_write,
                cache_write_1h_tokens: u.cache_write_1h,
            }
            .bounded(),
            None => {
                let input_chars: usize = request.system.len()
                    + request
                        .messages
                        .iter()
                        .map(|m| m.content.len() + 16)
                        .sum::<usize>();
                let output_chars = text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>();
                Usage {
                    input_tokens: estimate_tokens(input_chars),
                    output_tokens: estimate_tokens(output_chars),
                    ..Usage::default()
                }
            }
        };
        Ok(Response {
            text,
            tool_calls,
            usage,
            // A script "reports" its usage even when estimated, so scripted
            // runs keep exact numbers; `no_usage: true` says otherwise.
            usage_reported: !reply.no_usage,
            finish,
            extra: None,
            cost_override: reply.cost,
            model: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorClass, NoObserver};

    fn request() -> Request<'static> {
        Request {
            system: "",
            messages: &[],
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "script/t.yaml",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        }
    }

    fn run(model: &ScriptModel) -> Result<Response, ModelError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(model.complete(&request(), &NoObserver))
    }

    #[test]
    fn replies_in_order_then_the_last_repeats() {
        let m = ScriptModel::parse(
            "- error: {status: 503}\n  repeat: 2\n- text: hi\n  usage: {input: 10, output: 2}\n",
        )
        .unwrap();
        assert_eq!(
            run(&m).unwrap_err().class(),
            ErrorClass::Transient("http_503".into())
        );
        assert!(run(&m).is_err());
        let ok = run(&m).unwrap();
        assert_eq!(ok.text, "hi");
        assert_eq!(ok.usage.input_tokens, 10);
        assert_eq!(run(&m).unwrap().text, "hi");
    }

    #[test]
    fn error_kinds_map_to_classes() {
        let m = ScriptModel::parse(
            "- error: {kind: quota}\n- error: {kind: network}\n- error: {kind: timeout}\n- error: {kind: context_overflow}\n- error: {status: 401}\n",
        )
        .unwrap();
        assert_eq!(run(&m).unwrap_err().class(), ErrorClass::Quota);
        assert_eq!(run(&m).unwrap_err().reason(), "network");
        assert_eq!(run(&m).unwrap_err().reason(), "timeout");
        assert_eq!(run(&m).unwrap_err().class(), ErrorClass::ContextOverflow);
        assert_eq!(run(&m).unwrap_err().class(), ErrorClass::Fatal);
    }

    #[test]
    fn tool_calls_and_garbled_arguments() {
        let m = ScriptModel::parse(
            "- tool_calls:\n  - {name: bash, arguments: {command: ls}}\n  - {name: bash, arguments: '{\"command\": '}\n",
        )
        .unwrap();
        let r = run(&m).unwrap();
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls[0].arguments["command"], "ls");
        assert!(!r.tool_calls[0].garbled);
        assert!(r.tool_calls[1].garbled);
    }

    #[test]
    fn refusals_empty_replies_and_unreported_usage() {
        let m = ScriptModel::parse(
            "- refusal: I can't help with that.\n- error: {kind: empty_response}\n- text: hi\n  no_usage: true\n- text: hi\n",
        )
        .unwrap();
        assert_eq!(
            run(&m).unwrap_err(),
            ModelError::Refusal {
                text: "I can't help with that.".into()
            }
        );
        let empty = run(&m).unwrap();
        assert!(empty.text.is_empty() && empty.tool_calls.is_empty());
        assert!(!run(&m).unwrap().usage_reported);
        assert!(run(&m).unwrap().usage_reported);
    }

    #[test]
    fn unknown_keys_and_kinds_are_errors() {
        assert!(ScriptModel::parse("- txt: hi\n").is_err());
        assert!(ScriptModel::parse("- error: {kind: weird}\n").is_err());
        assert!(ScriptModel::parse("[]").is_err());
    }
}
