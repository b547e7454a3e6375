//! The `plan` tool: the model keeps a short task list, stored in the
//! trajectory and kept across resume.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Tool, ToolCtx, ToolOutput};
use crate::conversation::ToolSpec;

/// One plan item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanItem {
    pub text: String,
    pub status: PlanStatus,
}

/// `pending`, `in_progress` or `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Done,
}

/// The plan, shared between the tool and the trajectory.
pub(crate) type SharedPlan = Arc<Mutex<Vec<PlanItem>>>;

/// The `plan` tool: replaces the whole plan with the given items.
pub(crate) struct PlanTool {
    pub plan: SharedPlan,
}

#[async_trait]
impl Tool for PlanTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "plan".into(),
            description: "Record or update your plan: the full list of items, each with a status (pending, in_progress, done).".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "text": {"type": "string"},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "done"]}
                            },
                            "required": ["text", "status"]
                        }
                    }
                },
                "required": ["items"]
            }),
        }
    }

    async fn run(&self, args: &Value, _ctx: &ToolCtx) -> ToolOutput {
        let items: Vec<PlanItem> = match args.get("items").cloned().map(serde_json::from_value) {
            Some(Ok(items)) => items,
            Some(Err(e)) => return ToolOutput::err(format!("invalid plan items: {e}")),
            None => return ToolOutput::err("missing argument 'items'"),
        };
        let summary: Vec<String> = items
            .iter()
            .map(|i| {
                let mark = match i.status {
                    PlanStatus::Pending => "[ ]",
                    PlanStatus::InProgress => "[~]",
                    PlanStatus::Done => "[x]",
                };
                format!("{mark} {}", i.text)
            })
            .collect();
        let done = items
            .iter()
            .filter(|i| i.status == PlanStatus::Done)
            .count();
        let total = items.len();
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = items;
        ToolOutput::ok(format!(
            "plan updated ({done}/{total} done):\n{}",
            summary.join("\n")
        ))
    }
}
