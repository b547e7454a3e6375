//! Prompt caches counted and priced (SPEC 25 "Counted and priced"): each
//! door's cache reads and writes, as its vendor reports them, reach
//! `model.response`, the trajectory's totals, the log database's
//! `model_requests` and the summary line's `· N% cached`, priced at the
//! model's cached and write prices (a one-hour write at 1.6 times the
//! write price); usage that lies never makes a negative cost or a panic.

use rusqlite::Connection;
use serde_json::{json, Value};

use crate::support::anthropic::{event, message_delta, message_stop, text_block, tool_use_block};
use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::openai::{done, text_events, tool_call_events, usage_chunk};
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// An Anthropic reply with `usage` on `message_start` (as the API sends
/// it) calling `tool` with `input`, or answering `text` when `tool` is None.
fn anthropic_reply(usage: Value, tool: Option<(&str, Value)>) -> Reply {
    let mut out = vec![event(json!({"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null,
        "usage": usage}}))];
    let stop = match tool {
        Some((name, input)) => {
            out.extend(tool_use_block(0, "toolu_01", name, &[&input.to_string()]));
            "tool_use"
        }
        None => {
            out.extend(text_block(0, &["All done."]));
            "end_turn"
        }
    };
    out.push(message_delta(stop, 20));
    out.push(message_stop());
    Reply::sse(out)
}

/// Anthropic's usage: `input_tokens` is the uncached rest, the writes'
/// lifetimes in `cache_creation`.
fn claude_usage(fresh: u64, read: u64, write_5m: u64, write_1h: u64) -> Value {
    json!({"input_tokens": fresh, "cache_read_input_tokens": read,
           "cache_creation_input_tokens": write_5m + write_1h,
           "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
           "output_tokens": 1, "service_tier": "standard"})
}

fn anthropic_cmd(env: &TestEnv, stub: &Stub) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test-cache");
    cmd
}

/// Sonnet 4.5 at the built-in prices ($3 in, $15 out, $0.30 read, $3.75
/// write): a cold step that writes the prompt for an hour, then a warm one
/// that reads it. Every place that carries usage says the same.
#[test]
fn anthropic_reads_and_writes_reach_every_record_at_their_prices() {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{RETRY}"));
    let stub = Stub::sequence(vec![
        anthropic_reply(
            claude_usage(10, 0, 1_000, 4_000),
            Some(("bash", json!({"command": "ls"}))),
        ),
        anthropic_reply(claude_usage(90, 5_000, 400, 0), None),
    ]);
    let traj = env.file("traj.json");
    let db = env.file("log.db");
    let out = anthropic_cmd(&env, &stub)
        .args(["-m", "anthropic/claude-sonnet-4-5", "--json", "-o"])
        .arg(&traj)
        .arg("--log-db")
        .arg(&db)
        .arg("look around")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses.len(), 2);
    // Input stays the whole prompt.
    let first = responses[0];
    assert_eq!(first["input_tokens"], 5_010);
    assert_eq!(first["cached_input_tokens"], 0);
    assert_eq!(first["cache_write_tokens"], 5_000);
    let cold = (10.0 * 3.0 + 1_000.0 * 3.75 + 4_000.0 * 3.75 * 1.6 + 20.0 * 15.0) / 1e6;
    assert!(close(first["cost_usd"].as_f64().unwrap(), cold), "{first}");
    let second = responses[1];
    assert_eq!(second["input_tokens"], 5_490);
    assert_eq!(second["cached_input_tokens"], 5_000);
    assert_eq!(second["cache_write_tokens"], 400);
    let warm = (90.0 * 3.0 + 5_000.0 * 0.30 + 400.0 * 3.75 + 20.0 * 15.0) / 1e6;
    assert!(
        close(second["cost_usd"].as_f64().unwrap(), warm),
        "{second}"
    );
    let end = finished(&ev);
    assert_eq!(end["input_tokens"], 10_500);
    assert!(close(end["cost_usd"].as_f64().unwrap(), cold + warm));

    let doc = read_json(&traj);
    let totals = &doc["totals"];
    assert_eq!(totals["input_tokens"], 10_500);
    assert_eq!(totals["cached_input_tokens"], 5_000);
    assert_eq!(totals["cache_write_tokens"], 5_400);

    let conn = Connection::open(&db).unwrap();
    let rows: Vec<(i64, i64, i64, f64)> = conn
        .prepare(
            "SELECT input_tokens, cached_input_tokens, cache_write_tokens, cost_usd
             FROM model_requests ORDER BY step",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].0, rows[0].1, rows[0].2), (5_010, 0, 5_000));
    assert_eq!((rows[1].0, rows[1].1, rows[1].2), (5_490, 5_000, 400));
    assert!(close(rows[1].3, warm));
}

/// The human summary line gives the share of input read from a cache.
#[test]
fn the_summary_line_says_how_much_input_was_cached() {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{RETRY}"));
    let stub = Stub::sequence(vec![
        anthropic_reply(
            claude_usage(100, 0, 900, 0),
            Some(("bash", json!({"command": "ls"}))),
        ),
        anthropic_reply(claude_usage(100, 900, 0, 0), None),
    ]);
    let out = anthropic_cmd(&env, &stub)
        .args(["-m", "anthropic/claude-sonnet-4-5", "look around"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    // 900 of 2,000 input tokens read from the cache.
    let summary = err
        .lines()
        .find(|l| l.starts_with("completed after 2 steps"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        summary.contains(" · 2.0k tokens · 45% cached · $"),
        "{summary}"
    );

    // No cache read: no share.
    let stub = Stub::sequence(vec![anthropic_reply(claude_usage(100, 0, 900, 0), None)]);
    let out = anthropic_cmd(&env, &stub)
        .args(["-m", "anthropic/claude-sonnet-4-5", "hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("cached"), "{}", stderr(&out));
}

/// A named provider's `cache_write_price` prices the writes (a one-hour
/// write at 1.6 times it); without one a write costs the input price.
#[test]
fn a_named_providers_cache_write_price_prices_its_writes() {
    let env = TestEnv::new();
    let stub = Stub::start(|_, _| {
        anthropic_reply(
            json!({"input_tokens": 0, "cache_read_input_tokens": 0,
                   "cache_creation_input_tokens": 1_000_000,
                   "cache_creation": {"ephemeral_5m_input_tokens": 500_000, "ephemeral_1h_input_tokens": 500_000},
                   "output_tokens": 0}),
            None,
        )
    });
    let config = env.write(
        "c.yaml",
        &format!(
            "health_db: off\n{RETRY}providers:\n  gw:\n    api: anthropic\n    endpoint: {}\n    models:\n      priced: {{input_price: 2, output_price: 0, cached_input_price: 0.2, cache_write_price: 10}}\n      plain: {{input_price: 2, output_price: 0}}\n",
            stub.url()
        ),
    );
    let cost = |model: &str| {
        let out = env
            .cmd()
            .args(["-m", model, "--json", "-c"])
            .arg(&config)
            .arg("hello")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let ev = events(&out.stdout);
        let r = of_type(&ev, "model.response")[0].clone();
        assert_eq!(r["cache_write_tokens"], 1_000_000, "{r}");
        r["cost_usd"].as_f64().unwrap()
    };
    // 0.5M at $10 + 0.5M at $16.
    assert!(close(cost("gw/priced"), 13.0), "{}", cost("gw/priced"));
    // 0.5M at $2 + 0.5M at $3.20.
    assert!(close(cost("gw/plain"), 2.6), "{}", cost("gw/plain"));
}

/// Chat Completions (OpenAI's own door at the built-in price): the cached
/// prompt tokens are read and priced at gpt-5's cached price.
#[test]
fn openai_cached_tokens_are_read_and_priced() {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{RETRY}"));
    // Each stream with its usage chunk replaced by one with `cached` reads.
    let with_usage = |events: Vec<String>, cached: u64| {
        let mut out: Vec<String> = events
            .into_iter()
            .filter(|e| !e.contains("\"usage\"") && !e.contains("[DONE]"))
            .collect();
        out.push(usage_chunk(10_000, 100, cached));
        out.push(done());
        out
    };
    let first = with_usage(tool_call_events("call_1", "bash", r#"{"command":"ls"}"#), 0);
    let second = with_usage(text_events("Done."), 9_984);
    let stub = Stub::sequence(vec![Reply::sse(first), Reply::sse(second)]);
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-cache")
        .args(["-m", "openai/gpt-5", "--json", "-o"])
        .arg(&traj)
        .arg("look")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let r = of_type(&ev, "model.response");
    assert_eq!(r[1]["cached_input_tokens"], 9_984);
    assert_eq!(r[1]["cache_write_tokens"], 0);
    let warm = (16.0 * 1.25 + 9_984.0 * 0.125 + 100.0 * 10.0) / 1e6;
    assert!(close(r[1]["cost_usd"].as_f64().unwrap(), warm), "{}", r[1]);
    assert_eq!(read_json(&traj)["totals"]["cached_input_tokens"], 9_984);
}

/// Bedrock Converse (Claude through the `us.` cross-region profile, at
/// Bedrock's published price for it: 10% over the global profile's):
/// `inputTokens` leaves the cache out; reads, writes and the one-hour share
/// from `cacheDetails` are read and priced.
#[test]
fn bedrock_reads_and_writes_are_read_and_priced() {
    let env = cloud_env(RETRY, "");
    let usage = json!({"inputTokens": 100, "outputTokens": 10, "totalTokens": 6110,
        "cacheReadInputTokens": 4000, "cacheWriteInputTokens": 2000,
        "cacheDetails": [{"inputTokens": 1000, "ttl": "1h"}, {"inputTokens": 1000, "ttl": "5m"}]});
    let fake = FakeCloud::scripted(
        "bedrock",
        &env,
        &json!({"replies": [{"text": "Done.", "usage": usage}]}),
        &[],
    );
    let out = env
        .cmd()
        .env("AWS_ACCESS_KEY_ID", "AKIDTINYAGENTFAKE")
        .env("AWS_SECRET_ACCESS_KEY", "tinyagent/fake/secret+key")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args([
            "-m",
            "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "--json",
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let r = of_type(&ev, "model.response")[0];
    assert_eq!(r["input_tokens"], 6_100);
    assert_eq!(r["cached_input_tokens"], 4_000);
    assert_eq!(r["cache_write_tokens"], 2_000);
    let cost = 1.1
        * (100.0 * 3.0 + 4_000.0 * 0.30 + 1_000.0 * 3.75 + 1_000.0 * 3.75 * 1.6 + 10.0 * 15.0)
        / 1e6;
    let got = r["cost_usd"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-9, "{got} vs {cost}");
}

/// Gemini's implicit cache: `cachedContentTokenCount` is a part of the
/// prompt, priced at the cached price; nothing is written.
#[test]
fn gemini_cached_content_is_read_and_priced() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted(
        "gemini",
        &env,
        &json!([{"text": "Done.", "usage": {"promptTokenCount": 20_000, "candidatesTokenCount": 50,
            "totalTokenCount": 20_050, "cachedContentTokenCount": 16_000,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 20_000}],
            "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 16_000}]}}]),
        &["--key", "gemini-test-key"],
    );
    let out = env
        .cmd()
        .env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
        .env("GEMINI_API_KEY", "gemini-test-key")
        .args(["-m", "gemini/gemini-2.5-flash", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let r = of_type(&ev, "model.response")[0];
    assert_eq!(r["input_tokens"], 20_000);
    assert_eq!(r["cached_input_tokens"], 16_000);
    assert_eq!(r["cache_write_tokens"], 0);
    let cost = (4_000.0 * 0.30 + 16_000.0 * 0.03 + 50.0 * 2.50) / 1e6;
    assert!(close(r["cost_usd"].as_f64().unwrap(), cost), "{r}");
}

/// Azure OpenAI reports reads as OpenAI does, priced at the model the
/// reply names (`gpt-4o-2024-11-20` behind `prod-chat`).
#[test]
fn azure_cached_tokens_are_read_and_priced() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted(
        "azure",
        &env,
        &json!([{"text": "Done.", "usage": {"prompt_tokens": 8_000, "completion_tokens": 10, "total_tokens": 8_010,
            "prompt_tokens_details": {"cached_tokens": 7_936, "audio_tokens": 0}}}]),
        &[
            "--key",
            "azure-test-key",
            "--deployment",
            "prod-chat=gpt-4o-2024-11-20",
        ],
    );
    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_OPENAI_API_KEY", "azure-test-key")
        .args(["-m", "azure/prod-chat", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let r = of_type(&ev, "model.response")[0];
    assert_eq!(r["cached_input_tokens"], 7_936);
    let cost = (64.0 * 2.50 + 7_936.0 * 1.25 + 10.0 * 10.0) / 1e6;
    assert!(close(r["cost_usd"].as_f64().unwrap(), cost), "{r}");
}

/// The offline script model takes `cached_input` and `cache_write`, so a
/// run's cache figures can be driven without a server.
#[test]
fn a_script_reports_cache_figures() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {command: ls}}\n  usage: {input: 1000, output: 10, cache_write: 900}\n- tool_calls:\n    - {name: submit, arguments: {output: done}}\n  usage: {input: 1100, output: 10, cached_input: 900, cache_write: 100, cache_write_1h: 100}\n",
    );
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-o"])
        .arg(&traj)
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let r = of_type(&ev, "model.response");
    assert_eq!(
        (&r[0]["cached_input_tokens"], &r[0]["cache_write_tokens"]),
        (&json!(0), &json!(900))
    );
    assert_eq!(
        (&r[1]["cached_input_tokens"], &r[1]["cache_write_tokens"]),
        (&json!(900), &json!(100))
    );
    let totals = &read_json(&traj)["totals"];
    assert_eq!(totals["cached_input_tokens"], 900);
    assert_eq!(totals["cache_write_tokens"], 1000);
}

/// Usage that lies (strings, negatives, reads larger than the input,
/// absurd counts, a cache object that is a string): the run goes on, no
/// cost is negative, and the summary's share is never over 100%.
#[test]
fn usage_that_lies_never_makes_a_negative_cost_or_a_share_over_everything() {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{RETRY}"));
    let lies = [
        json!({"input_tokens": -50, "cache_read_input_tokens": "9000", "cache_creation_input_tokens": -1, "output_tokens": "x"}),
        json!({"input_tokens": u64::MAX, "cache_read_input_tokens": u64::MAX, "cache_creation_input_tokens": 1e300,
               "cache_creation": "1h", "output_tokens": 1}),
        json!({"input_tokens": 10, "cache_read_input_tokens": 500, "cache_creation": {"ephemeral_1h_input_tokens": 99_999}}),
        json!("usage"),
    ];
    let mut replies: Vec<Reply> = lies[..3]
        .iter()
        .map(|u| anthropic_reply(u.clone(), Some(("bash", json!({"command": "true"})))))
        .collect();
    replies.push(anthropic_reply(lies[3].clone(), None));
    let stub = Stub::sequence(replies);
    let db = env.file("log.db");
    let traj = env.file("t.json");
    let out = anthropic_cmd(&env, &stub)
        .args(["-m", "anthropic/claude-sonnet-4-5", "--json", "-o"])
        .arg(&traj)
        .arg("--log-db")
        .arg(&db)
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    let ev = events(&out.stdout);
    for r in of_type(&ev, "model.response") {
        let cost = r["cost_usd"].as_f64().unwrap();
        assert!(cost >= 0.0 && cost.is_finite(), "{r}");
        let input = r["input_tokens"].as_u64().unwrap();
        let cached = r["cached_input_tokens"].as_u64().unwrap();
        let written = r["cache_write_tokens"].as_u64().unwrap();
        assert!(cached + written <= input, "{r}");
    }
    let totals = &read_json(&traj)["totals"];
    assert!(
        totals["cached_input_tokens"].as_u64().unwrap() <= totals["input_tokens"].as_u64().unwrap(),
        "{totals}"
    );
    let conn = Connection::open(&db).unwrap();
    let negative: i64 = conn
        .query_row(
            "SELECT count(*) FROM model_requests WHERE cost_usd < 0 OR cached_input_tokens < 0
             OR cache_write_tokens < 0 OR cached_input_tokens + cache_write_tokens > input_tokens",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(negative, 0);

    // In human mode the share stays at most 100%.
    let stub = Stub::sequence(vec![anthropic_reply(lies[2].clone(), None)]);
    let out = anthropic_cmd(&env, &stub)
        .args(["-m", "anthropic/claude-sonnet-4-5", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(" · 98% cached · "), "{err}");
}

/// A log database of schema version 3 (before the cache columns), with a
/// request row in it: two runs opening it at once both migrate it without
/// failing, the old row is kept (its cache figures 0), and the new rows
/// carry theirs.
#[test]
fn a_version_three_log_gains_the_cache_columns_even_when_two_runs_migrate_it() {
    let env = TestEnv::new();
    let db = env.file("log.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch(V3_SCHEMA)
        .unwrap();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n    - {name: submit, arguments: {output: done}}\n  usage: {input: 500, output: 5, cached_input: 400, cache_write: 50}\n",
    );
    let spawn = || {
        env.std_cmd()
            .args(["-m", &model, "-q", "--log-db"])
            .arg(&db)
            .arg("task")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let conn = Connection::open(&db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 4);
    let old: (i64, i64, i64, f64) = conn
        .query_row(
            "SELECT input_tokens, cached_input_tokens, cache_write_tokens, cost_usd
             FROM model_requests WHERE run_id = 'old-run'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(old, (700, 0, 0, 0.5));
    let new: Vec<(i64, i64)> = conn
        .prepare(
            "SELECT cached_input_tokens, cache_write_tokens FROM model_requests
             WHERE run_id <> 'old-run'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(new, [(400, 50), (400, 50)]);
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 3);
}

/// Schema version 3 as tinyagent wrote it before the cache columns.
const V3_SCHEMA: &str = "CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL,
    finished_at TEXT, task TEXT NOT NULL, cwd TEXT NOT NULL, model TEXT NOT NULL,
    fallback_models TEXT, active_model TEXT, status TEXT NOT NULL, exit_code INTEGER,
    steps INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, error TEXT,
    resumed_from TEXT);
CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL,
    type TEXT NOT NULL, step INTEGER, data TEXT NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE tool_calls (run_id TEXT NOT NULL, step INTEGER NOT NULL, call_id TEXT NOT NULL,
    tool TEXT NOT NULL, arguments TEXT NOT NULL, ok INTEGER, output TEXT,
    started_at TEXT NOT NULL, finished_at TEXT, duration_ms INTEGER);
CREATE INDEX tool_calls_by_call ON tool_calls (run_id, call_id);
CREATE INDEX events_by_type ON events (type);
CREATE INDEX runs_by_started ON runs (started_at);
CREATE TABLE model_requests (run_id TEXT NOT NULL, step INTEGER NOT NULL, model TEXT NOT NULL,
    endpoint TEXT, attempt INTEGER NOT NULL, started_at TEXT NOT NULL, first_event_ms INTEGER,
    duration_ms INTEGER NOT NULL, outcome TEXT NOT NULL, http_status INTEGER,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0, paced_ms INTEGER NOT NULL DEFAULT 0);
CREATE INDEX model_requests_by_started ON model_requests (started_at);
CREATE INDEX model_requests_by_run ON model_requests (run_id, step);
INSERT INTO runs (run_id, started_at, task, cwd, model, status)
    VALUES ('old-run', '2026-06-01T00:00:00Z', 'old task', '/w', 'script/x', 'completed');
INSERT INTO model_requests (run_id, step, model, attempt, started_at, duration_ms, outcome,
    http_status, input_tokens, output_tokens, cost_usd)
    VALUES ('old-run', 1, 'script/x', 1, '2026-06-01T00:00:00Z', 10, 'ok', 200, 700, 7, 0.5);
PRAGMA user_version = 3;";

/// A checkpoint written before `cache_write_tokens` existed resumes with
/// it as 0 and goes on counting.
#[test]
fn an_old_checkpoint_without_cache_writes_resumes_from_zero() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n    - {name: submit, arguments: {output: done}}\n  usage: {input: 100, output: 5, cache_write: 60}\n",
    );
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "-q", "-o"])
        .arg(&traj)
        .arg("first")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut doc = read_json(&traj);
    doc["totals"]
        .as_object_mut()
        .unwrap()
        .remove("cache_write_tokens");
    std::fs::write(&traj, doc.to_string()).unwrap();
    let out = env
        .cmd()
        .args(["-m", &model, "-q", "--resume"])
        .arg(&traj)
        .arg("again")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(read_json(&traj)["totals"]["cache_write_tokens"], 60);
}

/// Vertex AI's regional endpoint (`us-east5`) bills Claude Sonnet 4.5 at
/// 10% over the global endpoint, the Anthropic API's price.
#[test]
fn claude_on_a_vertex_regional_endpoint_costs_its_published_premium() {
    use crate::providers_vertex::{cmd, env_with, fake};
    let env = env_with("");
    let fake = fake(&env, json!([{"text": "Done."}]), "ok");
    let key = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fakes/fixtures/throwaway-service-account.pem"),
    )
    .unwrap();
    let sa = env.write(
        "sa.json",
        &json!({"type": "service_account", "project_id": "file-project", "private_key_id": "k1",
            "private_key": key, "client_email": "agent@file-project.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": format!("{}/token", fake.url())})
        .to_string(),
    );
    let cost = |region: &str| {
        let out = cmd(&env, &fake)
            .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
            .env("CLOUD_ML_REGION", region)
            .args(["-m", "vertex/claude-sonnet-4-5@20250929", "--json", "go"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let ev = events(&out.stdout);
        let response = of_type(&ev, "model.response")[0].clone();
        let count = |field: &str| response[field].as_u64().unwrap() as f64;
        // Claude Sonnet 4.5's list prices for what the fake's cache reports.
        let (read, written) = (count("cached_input_tokens"), count("cache_write_tokens"));
        let fresh = count("input_tokens") - read - written;
        let global =
            (fresh * 3.0 + read * 0.3 + written * 3.75 + count("output_tokens") * 15.0) / 1e6;
        (response["cost_usd"].as_f64().unwrap(), global)
    };
    let (global, list_price) = cost("global");
    assert!(
        global > 0.0 && (global - list_price).abs() < 1e-12,
        "{global} {list_price}"
    );
    let (regional, list_price) = cost("us-east5");
    assert!(
        (regional - 1.1 * list_price).abs() < 1e-12,
        "{regional} {list_price}"
    );
}
