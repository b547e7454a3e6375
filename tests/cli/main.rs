//! End-to-end tests of the `tinyagent` binary: one test binary, one file per
//! behaviour area, shared support in `support/`.

mod support;

mod check;
mod compaction;
mod core;
mod fallback;
mod github;
mod health;
mod hooks;
mod layers;
mod logdb;
mod mcp;
mod model_requests;
mod providers_anthropic;
mod providers_ollama;
mod providers_openai;
mod providers_responses;
mod resume;
mod sandbox;
mod schema;
mod subagents;
mod traces;
mod translation;
mod worktree;
