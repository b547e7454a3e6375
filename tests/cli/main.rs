//! End-to-end tests of the `tinyagent` binary: one test binary, one file per
//! behaviour area, shared support in `support/`.

mod support;

mod action;
mod check;
mod compaction;
mod core;
mod deadlines;
mod docs;
mod errors;
mod fallback;
mod forgiving;
mod generate;
mod github;
mod health;
mod health_redis;
mod hooks;
mod install;
mod instructions;
mod interactive;
mod layers;
mod logdb;
mod mcp;
mod model_requests;
mod providers_anthropic;
mod providers_ollama;
mod providers_openai;
mod providers_responses;
mod recorded;
mod resume;
mod runs;
mod sandbox;
mod schema;
mod stdin;
mod subagents;
mod tools;
mod traces;
mod translation;
mod unstreamed;
mod usage;
mod view;
mod waits;
mod wire_compat;
mod worktree;
