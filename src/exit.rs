//! Run statuses and the exit-code table (SPEC section 1), in one place.

use serde::{Deserialize, Serialize};

/// How a run ended (or `Running` while it goes on). Its wire name is the
/// variant's in snake case, for serde and `as_str` alike.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    Running,
    Submitted,
    Completed,
    Error,
    OutputTruncated,
    StepLimit,
    CostLimit,
    TimeLimit,
    /// A budget across runs is spent (SPEC 19); `error` names it.
    BudgetLimit,
    Interrupted,
}

impl Status {
    /// The wire name: `completed`, `step_limit`...
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the run ended with an answer (`submitted` or `completed`):
    /// the one place that says so, for the sinks and the exit code alike.
    pub fn answered(self) -> bool {
        matches!(self, Status::Submitted | Status::Completed)
    }

    /// The process exit code for a run that ended with this status.
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Submitted | Status::Completed => 0,
            Status::Error | Status::OutputTruncated | Status::Running => 1,
            Status::StepLimit | Status::CostLimit | Status::TimeLimit | Status::BudgetLimit => 3,
            Status::Interrupted => 130,
        }
    }
}

/// Usage, config or validation error: always before any model request.
pub const USAGE: i32 = 2;

/// EX_TEMPFAIL: the run ended in `error` only because every model it could
/// ask failed on a transient or quota cause (an outage); worth resuming.
pub const TEMPFAIL: i32 = 75;

/// The exit code of a run that ended with `status`; `outage` when its error
/// was the chain running out of models on transient or quota failures.
pub fn exit_code(status: Status, outage: bool) -> i32 {
    if outage && status == Status::Error {
        TEMPFAIL
    } else {
        status.exit_code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_table() {
        assert_eq!(Status::Submitted.exit_code(), 0);
        assert_eq!(Status::Completed.exit_code(), 0);
        assert_eq!(Status::Error.exit_code(), 1);
        assert_eq!(Status::OutputTruncated.exit_code(), 1);
        assert_eq!(Status::StepLimit.exit_code(), 3);
        assert_eq!(Status::CostLimit.exit_code(), 3);
        assert_eq!(Status::TimeLimit.exit_code(), 3);
        assert_eq!(Status::BudgetLimit.exit_code(), 3);
        assert_eq!(Status::BudgetLimit.as_str(), "budget_limit");
        assert_eq!(Status::Interrupted.exit_code(), 130);
    }

    #[test]
    fn serde_and_as_str_give_the_same_names() {
        for status in [
            Status::Running,
            Status::Submitted,
            Status::Completed,
            Status::Error,
            Status::OutputTruncated,
            Status::StepLimit,
            Status::CostLimit,
            Status::TimeLimit,
            Status::Interrupted,
        ] {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            let back: Status = serde_json::from_value(json).unwrap();
            assert_eq!(back, status);
        }
        assert_eq!(Status::OutputTruncated.as_str(), "output_truncated");
    }

    #[test]
    fn an_outage_is_tempfail_only_for_an_error() {
        assert_eq!(exit_code(Status::Error, true), 75);
        assert_eq!(exit_code(Status::Error, false), 1);
        assert_eq!(exit_code(Status::Interrupted, true), 130);
        assert_eq!(exit_code(Status::Submitted, false), 0);
    }
}
