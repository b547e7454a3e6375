//! The outage wait's probes from the outside (SPEC 18), measured at a
//! loopback provider: the first probe keeps the last failure's
//! Retry-After, and a fleet of waiting runs (on one machine sharing a
//! SQLite record, on two sharing a real redis-server) sends one request to
//! a dead model at a time: never two within 100 ms once they wait, a run
//! that joins the wait late included.

use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::openai::chat_sse_submit;
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, TestEnv};

/// An OpenAI-style 503.
fn overloaded() -> Reply {
    Reply::json(
        503,
        &json!({"error": {"message": "The server is overloaded or not ready yet.",
            "type": "server_error", "param": null, "code": null}}),
    )
}

struct Out {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn output(child: Child) -> Out {
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn spawn(env: &TestEnv, stub: &Stub, args: &[&str]) -> Child {
    env.std_cmd()
        .env("OPENAI_API_KEY", "sk-test-outage-probes")
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_waits_first_probe_keeps_the_servers_retry_after() {
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 2, backoff: 100ms, jitter: 0}\n");
    // Two attempts and the wait's first probe fail asking for 3 s; the
    // second probe is answered.
    let stub = Stub::start(|i, _| {
        if i < 3 {
            overloaded().header("retry-after", "3")
        } else {
            chat_sse_submit("call_1", "done")
        }
    });
    let args = ["--json", "-m", "openai/gpt-5", "--outage-wait", "1m", "x"];
    let out = output(spawn(&env, &stub, &args));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(finished(&out.events)["status"], "submitted");
    let gaps = stub.gaps();
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(2_990), "{gaps:?}");
        assert!(*gap < Duration::from_secs(6), "{gaps:?}");
    }
    assert!(
        out.stderr.contains(
            "outage: every model is down (openai/gpt-5: http_503); waiting up to 1m, next try in 3s"
        ),
        "{}",
        out.stderr
    );
}
