//! The `delegate` tool's schema and the subagent's toolset. The agent loop
//! runs the child itself (`agent/subagent.rs`), because the child's cost,
//! tokens and limits belong to the parent run.

use serde_json::json;

use super::files::{ListFiles, ReadFile};
use super::filter::ToolFilter;
use super::grep::GrepTool;
use super::ToolRegistry;
use crate::conversation::ToolSpec;

/// Added to a subagent's system prompt, naming the tools it is offered.
pub(crate) fn subagent_note(tools: &ToolRegistry) -> String {
    let names: Vec<String> = tools
        .available_specs()
        .into_iter()
        .map(|spec| spec.name)
        .collect();
    let can = if names.is_empty() {
        "You have no tools to look with (the configuration allows none of them)".to_string()
    } else {
        format!(
            "Your tools are {}: you cannot change anything or run commands",
            names.join(", ")
        )
    };
    format!(
        "You are a subagent: another agent delegated a read-only investigation to you. {can}. \
Investigate, then call submit with a concise, self-contained report of what you found: \
the agent that asked sees only that report, not your steps."
    )
}

/// The `delegate` tool (offered only when `subagents` is configured).
pub(crate) fn delegate_spec() -> ToolSpec {
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

/// The subagent's tools: read-only file access, as far as config
/// `tools: {allow, deny}` (the run's `filter`) allows it.
pub(crate) fn subagent_tools(filter: &ToolFilter) -> ToolRegistry {
    let mut tools = ToolRegistry::with_filter(filter.clone());
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
        let tools = subagent_tools(&ToolFilter::default());
        let names: Vec<&str> = tools.specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read_file", "list_files", "grep"]);
        assert_eq!(delegate_spec().parameters["required"][0], "task");
        assert!(subagent_note(&tools).contains("Your tools are read_file, list_files, grep:"));
    }

    #[test]
    fn the_config_filter_limits_the_subagents_tools_and_its_note() {
        let deny = ["read_file".to_string(), "grep".to_string()];
        let filter = ToolFilter::new(None, &deny, std::iter::empty::<&String>()).unwrap();
        let tools = subagent_tools(&filter);
        let offered: Vec<String> = tools
            .available_specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(offered, ["list_files"]);
        assert!(tools.get("read_file").is_none());
        let note = subagent_note(&tools);
        assert!(note.contains("Your tools are list_files:"), "{note}");
        assert!(!note.contains("grep"), "{note}");
    }
}
