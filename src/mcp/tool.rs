//! An MCP server's tool as one of ours: offered as `mcp__<server>__<tool>`
//! with the server's input schema; its text content comes back to the model,
//! `isError` as `ok: false`. A call to a server that died is an error result.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

use super::McpServer;
use crate::conversation::ToolSpec;
use crate::tools::{shorten, Tool, ToolCtx, ToolOutput, MAX_OUTPUT_CHARS};

/// Longest tool name the model APIs accept.
const MAX_NAME: usize = 64;

/// One tool of one MCP server.
pub(super) struct McpTool {
    server: Arc<McpServer>,
    /// The server's own name for the tool.
    remote_name: String,
    spec: ToolSpec,
}

impl McpTool {
    /// Wraps `tool` of `server`; an error (for a warning) when its name
    /// cannot be offered to a model.
    pub(super) fn new(
        server: Arc<McpServer>,
        tool: &rmcp::model::Tool,
    ) -> Result<McpTool, NameTooLong> {
        Ok(McpTool {
            remote_name: tool.name.to_string(),
            spec: spec_of(&server.name, tool)?,
            server,
        })
    }
}

/// A tool whose offered name would be too long for a model.
#[derive(Debug, thiserror::Error)]
#[error("MCP tool '{tool}' of server '{server}' skipped: its name {name} is longer than {MAX_NAME} characters")]
pub(crate) struct NameTooLong {
    tool: String,
    server: String,
    name: String,
}

/// The spec offered to the model for `tool` of `server`; an error (for a
/// warning) when its name cannot be offered.
pub(crate) fn spec_of(server: &str, tool: &rmcp::model::Tool) -> Result<ToolSpec, NameTooLong> {
    let name = tool_name(server, &tool.name);
    if name.len() > MAX_NAME {
        return Err(NameTooLong {
            tool: tool.name.to_string(),
            server: server.to_string(),
            name,
        });
    }
    let description = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .map(str::to_string)
        .unwrap_or_else(|| format!("The tool '{}' of the MCP server '{server}'.", tool.name));
    let mut parameters = Value::Object((*tool.input_schema).clone());
    if parameters.get("type").is_none() {
        parameters["type"] = json!("object");
    }
    Ok(ToolSpec {
        name,
        description,
        parameters,
    })
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn available(&self) -> bool {
        self.server.is_alive()
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let call = self.server.call(&self.remote_name, args.clone());
        tokio::select! {
            result = call => match result {
                Ok(result) => to_output(&result),
                Err(e) => ToolOutput::err(e.to_string()),
            },
            _ = ctx.stop.fired() => ToolOutput::err("stopped: the run was interrupted"),
        }
    }
}

/// `mcp__<server>__<tool>`, with characters model APIs refuse in tool names
/// replaced by `_`.
pub(super) fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("mcp__{}__{}", clean(server), clean(tool))
}

/// The text items of a result, joined by newlines; other items are noted;
/// structured content stands in when there is no content at all.
pub(crate) fn to_output(result: &CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for item in &result.content {
        parts.push(match item {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image content ({}) not shown]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio content ({}) not shown]", a.mime_type),
            ContentBlock::Resource(_) => "[embedded resource not shown]".to_string(),
            ContentBlock::ResourceLink(r) => format!("[resource link: {}]", r.uri),
            _ => "[content of an unknown kind not shown]".to_string(),
        });
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = shorten(&parts.join("\n"), MAX_OUTPUT_CHARS);
    if result.is_error == Some(true) {
        ToolOutput::err(text)
    } else {
        ToolOutput::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_cleaned() {
        assert_eq!(tool_name("docs", "search"), "mcp__docs__search");
        assert_eq!(tool_name("my docs", "get.page"), "mcp__my_docs__get_page");
    }

    #[test]
    fn text_items_are_joined_and_others_noted() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "text", "text": "two"}
            ]
        }))
        .unwrap();
        let out = to_output(&result);
        assert!(out.ok);
        assert_eq!(
            out.output,
            "one\n[image content (image/png) not shown]\ntwo"
        );
    }

    #[test]
    fn is_error_is_a_failure_and_structured_content_stands_in() {
        let result: CallToolResult = serde_json::from_value(
            json!({"content": [{"type": "text", "text": "bad"}], "isError": true}),
        )
        .unwrap();
        assert_eq!(to_output(&result), ToolOutput::err("bad"));
        let result: CallToolResult =
            serde_json::from_value(json!({"content": [], "structuredContent": {"n": 1}})).unwrap();
        assert_eq!(to_output(&result), ToolOutput::ok("{\"n\":1}"));
    }
}
