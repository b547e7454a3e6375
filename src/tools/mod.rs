//! The tools the model can call: the `Tool` trait, the registry, and output
//! shortening. A tool failure the model should see is a result with
//! `ok: false`; tools never end the run.

pub(crate) mod bash;
pub(crate) mod delegate;
pub(crate) mod files;
pub(crate) mod filter;
pub(crate) mod grep;
pub(crate) mod plan;
pub(crate) mod process;

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::conversation::ToolSpec;
use crate::stop::Stop;

/// What a tool reports back to the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolOutput {
    pub ok: bool,
    pub output: String,
}

impl ToolOutput {
    pub(crate) fn ok(output: impl Into<String>) -> Self {
        ToolOutput {
            ok: true,
            output: output.into(),
        }
    }
    pub(crate) fn err(output: impl Into<String>) -> Self {
        ToolOutput {
            ok: false,
            output: output.into(),
        }
    }
}

/// Where a tool runs.
#[derive(Clone)]
pub(crate) struct ToolCtx {
    pub cwd: PathBuf,
    pub stop: Stop,
}

impl ToolCtx {
    /// Resolves a tool path argument against the working directory.
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.cwd.join(p)
        }
    }
}

/// One tool: its schema for the model and how to run it.
#[async_trait]
pub(crate) trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput;
    /// Whether the tool is offered right now (an MCP tool whose server died
    /// is withdrawn).
    fn available(&self) -> bool {
        true
    }
}

/// The tools offered in a run, looked up by name.
#[derive(Default)]
pub(crate) struct ToolRegistry {
    tools: Vec<Box<dyn Tool>>,
    specs: Vec<ToolSpec>,
    /// Config `tools: {allow, deny}`.
    filter: filter::ToolFilter,
}

impl ToolRegistry {
    /// A registry offering only what `filter` allows.
    pub(crate) fn with_filter(filter: filter::ToolFilter) -> Self {
        ToolRegistry {
            filter,
            ..ToolRegistry::default()
        }
    }

    pub(crate) fn add(&mut self, tool: Box<dyn Tool>) {
        self.specs.push(tool.spec());
        self.tools.push(tool);
    }

    /// Every tool's spec, offered now or not.
    #[cfg(test)]
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The specs of the tools offered right now.
    pub(crate) fn available_specs(&self) -> Vec<ToolSpec> {
        self.specs
            .iter()
            .zip(&self.tools)
            .filter(|(s, t)| t.available() && self.filter.allows(&s.name))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// The tool `name`, when it is offered by config `tools:`.
    pub(crate) fn get(&self, name: &str) -> Option<&dyn Tool> {
        if !self.filter.allows(name) {
            return None;
        }
        self.specs
            .iter()
            .position(|s| s.name == name)
            .map(|i| &*self.tools[i])
    }
}

/// The schema of `submit`, which the agent loop handles itself.
pub(crate) fn submit_spec(output_schema: Option<&Value>) -> ToolSpec {
    let output = match output_schema {
        Some(schema) => schema.clone(),
        None => json!({"type": "string", "description": "The final answer for the user."}),
    };
    ToolSpec {
        name: "submit".into(),
        description:
            "Finish the task and hand over the final answer. Call it once, when the work is done."
                .into(),
        parameters: json!({
            "type": "object",
            "properties": {"output": output},
            "required": ["output"],
        }),
    }
}

/// A tool call without a string argument it needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("missing string argument '{0}'")]
pub(crate) struct MissingArg(String);

/// Reads a string argument.
pub(crate) fn str_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, MissingArg> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| MissingArg(name.to_string()))
}

/// Longest tool output kept, in characters.
pub(crate) const MAX_OUTPUT_CHARS: usize = 30_000;

/// Shortens long output, keeping its head and tail, with a note saying how
/// much was cut.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let keep_head = max_chars / 2;
    let keep_tail = max_chars - keep_head;
    let head: String = text.chars().take(keep_head).collect();
    let tail: String = text.chars().skip(total - keep_tail).collect();
    let cut = total - keep_head - keep_tail;
    format!("{head}\n[... {cut} characters cut from the middle of {total} ...]\n{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(&'static str, bool);

    #[async_trait]
    impl Tool for Fake {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.0.into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }
        }
        async fn run(&self, _: &Value, _: &ToolCtx) -> ToolOutput {
            ToolOutput::ok("")
        }
        fn available(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn unavailable_tools_are_not_offered() {
        let mut registry = ToolRegistry::default();
        registry.add(Box::new(Fake("bash", true)));
        registry.add(Box::new(Fake("mcp__dead__x", false)));
        let names: Vec<String> = registry
            .available_specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["bash"]);
        assert_eq!(registry.specs().len(), 2);
    }

    #[test]
    fn short_text_is_kept() {
        assert_eq!(shorten("hello", 10), "hello");
    }

    #[test]
    fn long_text_keeps_head_and_tail_with_a_note() {
        let text: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let short = shorten(&text, 20);
        assert!(short.starts_with(&text[..10]));
        assert!(short.ends_with(&text[90..]));
        assert!(short.contains("80 characters cut"), "{short}");
    }

    #[test]
    fn shortening_respects_char_boundaries() {
        let text = "é".repeat(50);
        let short = shorten(&text, 10);
        assert!(short.contains("40 characters cut"));
    }
}
