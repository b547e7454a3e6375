//! End-to-end tests of the `tinyagent` binary: one test binary, one file per
//! behaviour area, shared support in `support/`.

mod support;

mod compaction;
mod core;
mod errors;
mod fallback;
mod generate;
mod health;
mod hooks;
mod instructions;
mod interactive;
mod layers;
mod logdb;
mod mcp;
mod providers_anthropic;
mod providers_ollama;
mod providers_openai;
mod providers_responses;
mod resume;
mod runs;
mod sandbox;
mod schema;
mod stdin;
mod subagents;
mod tools;
mod translation;
mod view;
mod waits;
mod worktree;
