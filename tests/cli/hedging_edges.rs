//! Hedging at its edges (SPEC 23): a primary that answers in one body
//! (`stream: false`) before the hedge's first event wins; an admitted hedge
//! that never goes gives back what it took; `--hedge-after` below 100 ms,
//! and hedging with no later member, are told apart.

use std::time::Duration;

use serde_json::json;

use super::hedging::{rows, run};
use crate::support::openai::chat_sse_submit;
use crate::support::stub::{Reply, Stub};
use crate::support::{finished, of_type, TestEnv};

/// A Chat Completions reply in one body calling `submit` with `output`.
fn one_body_submit(output: &str) -> Reply {
    let args = json!({ "output": output }).to_string();
    Reply::json(
        200,
        &json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1796127647,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "submit", "arguments": args}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}}),
    )
}

/// `slow/m` (not streamed: `stream: false`) and `fast/m` on two stubs.
fn unstreamed_primary(slow: &Stub, fast: &Stub) -> String {
    format!(
        "providers:\n  slow:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: SLOW_KEY\n    stream: false\n    models:\n      m: {{input_price: 2.0, output_price: 8.0}}\n  fast:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: FAST_KEY\n    models:\n      m: {{input_price: 2.0, output_price: 8.0}}\n",
        slow.url(),
        fast.url()
    )
}

#[test]
fn an_unstreamed_reply_that_arrives_first_wins_the_race() {
    // Hedged at 300 ms; the primary's whole reply arrives at 700 ms, the
    // hedge's first event only at about 1.5 s.
    let slow = Stub::sequence(vec![
        one_body_submit("by-slow").delay(Duration::from_millis(700))
    ]);
    let fast = Stub::sequence(vec![
        chat_sse_submit("c1", "by-fast").delay(Duration::from_millis(1200))
    ]);
    let env = TestEnv::new();
    let db = env.file("log.db");
    let r = run(
        &env,
        &unstreamed_primary(&slow, &fast),
        &[
            "-m",
            "slow/m",
            "--fallback-model",
            "fast/m",
            "--hedge-after",
            "300ms",
            "--log-db",
            db.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let end = finished(&r.events);
    assert_eq!(end["output"], "by-slow", "{:?}", r.events);
    assert_eq!(end["active_model"], "slow/m");
    assert_eq!(end["model_fallbacks"], 0);
    assert!(of_type(&r.events, "model.fallback").is_empty());
    assert_eq!(of_type(&r.events, "model.hedge").len(), 1);
    let settled = of_type(&r.events, "model.hedge_settled");
    assert_eq!(settled.len(), 1, "{:?}", r.events);
    assert_eq!(
        (&settled[0]["winner"], &settled[0]["loser"]),
        (&json!("slow/m"), &json!("fast/m"))
    );
    let first_event = settled[0]["winner_first_event_ms"].as_u64().unwrap();
    assert!((600..1400).contains(&first_event), "{first_event}");

    let rows = rows(&db);
    let original = rows.iter().find(|r| r.0 == "slow/m").unwrap();
    assert_eq!(
        (original.3.as_str(), original.4),
        ("ok", Some(200)),
        "{rows:?}"
    );
    assert!(
        original.2.is_some(),
        "a whole body is a first event: {rows:?}"
    );
    let loser = rows.iter().find(|r| r.0 == "fast/m").unwrap();
    assert_eq!(loser.3, "hedged_out", "{rows:?}");
    // The answer's own cost is in the run's total, and the loser's estimate.
    let cost = end["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (original.7 + loser.7)).abs() < 1e-9,
        "{cost} vs {rows:?}"
    );
    assert!(original.7 > 0.0);
}

/// The run's stderr and exit code for `args` with a scripted primary.
fn scripted(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let a = env.script("a.yaml", "- text: hi\n");
    let out = env
        .cmd()
        .args(["-m", &a])
        .args(args)
        .arg("t")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hedge_after_below_100ms_is_refused_saying_what_is_accepted() {
    let env = TestEnv::new();
    let accepted = "give a duration of at least 100ms such as 2s, auto or off";
    for value in ["0s", "1ms", "99ms", "0", "-1s", "soon", "5"] {
        let (code, stderr) = scripted(&env, &["--hedge-after", value]);
        assert_eq!(code, Some(2), "{value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{value}: {stderr}");
        assert!(
            stderr.starts_with("tinyagent: error: --hedge-after: "),
            "{stderr}"
        );
        assert!(stderr.contains(&format!("'{value}'")), "{stderr}");
        assert!(stderr.contains(accepted), "{value}: {stderr}");
        assert!(!stderr.contains("tip"), "{stderr}");
    }
    for yaml in [
        "fallback: {hedge_after: 0s}\n",
        "fallback: {hedge_after: 50ms}\n",
        "fallback: {hedge_after: 0}\n",
    ] {
        let file = env.write("c.yaml", yaml);
        let (code, stderr) = scripted(&env, &["-c", file.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{yaml}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("c.yaml"), "{stderr}");
        assert!(stderr.contains("fallback.hedge_after"), "{stderr}");
        assert!(stderr.contains(accepted), "{yaml}: {stderr}");
    }
    let (code, stderr) = scripted(
        &env,
        &[
            "--hedge-after",
            "100ms",
            "--fallback-model",
            &env.script("b.yaml", "- text: b\n"),
        ],
    );
    assert_eq!(code, Some(0), "100ms is accepted: {stderr}");
}

#[test]
fn hedging_without_a_later_member_warns_once_that_it_does_nothing() {
    let env = TestEnv::new();
    for args in [&["--hedge-after", "2s"][..], &["--hedge-after", "auto"][..]] {
        let (code, stderr) = scripted(&env, args);
        assert_eq!(code, Some(0), "{stderr}");
        let warned: Vec<_> = stderr
            .lines()
            .filter(|l| l.contains("does nothing") && l.contains("no fallback model"))
            .collect();
        assert_eq!(warned.len(), 1, "{args:?}: {stderr}");
    }
    let a = env.script("a.yaml", "- text: hi\n");
    let out = env
        .cmd()
        .args(["-m", &a, "--hedge-after", "2s", "--json", "t"])
        .output()
        .unwrap();
    let events = crate::support::events(&out.stdout);
    let warnings = of_type(&events, "warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]["message"]
        .as_str()
        .unwrap()
        .contains("--hedge-after"));
    // With a later member, or with hedging off, no such warning.
    let b = env.script("b.yaml", "- text: b\n");
    for args in [
        &["--hedge-after", "2s", "--fallback-model", &b][..],
        &["--hedge-after", "off"][..],
        &[][..],
    ] {
        let (code, stderr) = scripted(&env, args);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains("does nothing"), "{args:?}: {stderr}");
    }
}
