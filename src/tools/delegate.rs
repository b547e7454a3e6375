//! The `delegate` tool's schema and the subagent's toolset. The agent loop
//! runs the child itself (`agent/subagent.rs`), because the child's cost,
//! tokens and limits belong to the parent run.

use serde_json::json;

use super::files::{ListFiles, ReadFile};
use super::grep::GrepTool;
use super::ToolRegistry;
use crate::conversation::ToolSpec;

/// Added to a subagent's system prompt.
pub const SUBAGENT_NOTE: &str = "You are a subagent: another agent delegated a read-only investigation to you. \
You can only read and list files (read_file, list_files); you cannot change anything or run commands. \
Investigate, then call submit with a concise, self-contained report of what you found: \
the agent that asked sees only that report, not your steps.";

/// The `delegate` tool (offered only when `subagents` is configured).
pub fn delegate_spec() -> ToolSpec {
    ToolSpec {
        name: "delegate".into(),
        description: "Hand a read-only investigation (finding where something lives, reading and summarising code) \
to a subagent with its own fresh context and a cheaper model. It can read and list files but not change them \
or run commands. Only its final report comes back. Give a self-contained task: it does not see this conversation."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What to investigate and what the report should contain."}
            },
            "required": ["task"]
        }),
    }
}

/// The subagent's tools: read-only file access.
pub fn subagent_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::default();
    tools.add(Box::new(ReadFile));
    tools.add(Box::new(ListFiles));
    tools.add(Box::new(GrepTool));
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subagents_get_only_read_only_tools() {
        let tools = subagent_tools();
        let names: Vec<&str> = tools.specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read_file", "list_files", "grep"]);
        assert_eq!(delegate_spec().parameters["required"][0], "task");
    }
}
