"""Records real response bytes from the compatibility servers.

Usage: record.py --llama URL --litellm URL --out DIR

Each recording is the body exactly as the server sent it (the HTTP chunked
framing removed), in DIR/<server>/<name>.<sse|json>, beside
<name>.request.json, the request that produced it, and <name>.status, its
HTTP status. tests/cli/recorded.rs replays them through the loopback stub.
Only loopback URLs are accepted.
"""

import argparse
import http.client
import json
import pathlib
import sys
import urllib.parse

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the final answer.",
            "parameters": {
                "type": "object",
                "properties": {"output": {"type": "string"}},
                "required": ["output"],
            },
        },
    },
]
SYSTEM = "You are a coding agent. Use the tools to do the task."
TASK = "Use the bash tool to run the command: echo compat-ok"
FORCE_BASH = {"type": "function", "function": {"name": "bash"}}
# The second request of a tool run: the call (content "", as tinyagent
# sends it) and its result.
AFTER_TOOL = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": TASK},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "echo compat-ok"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "compat-ok\n"},
]


def post(base: str, path: str, body: dict) -> tuple[int, str, bytes]:
    url = urllib.parse.urlsplit(base)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"record: {base} is not a loopback address")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"content-type": "application/json", "authorization": "Bearer none"},
    )
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, response.getheader("content-type", ""), data


def save(out: pathlib.Path, name: str, body: dict, status: int, ctype: str, data: bytes):
    out.mkdir(parents=True, exist_ok=True)
    ext = "sse" if "event-stream" in ctype else "json"
    (out / f"{name}.{ext}").write_bytes(data)
    (out / f"{name}.request.json").write_text(json.dumps(body, indent=2) + "\n")
    (out / f"{name}.status").write_text(f"{status}\n")
    print(f"record: {out.name}/{name}.{ext}: HTTP {status}, {len(data)} bytes")


def chat(model: str, messages: list, stream: bool, tools: bool, force, max_tokens=48):
    """`force`: True forces bash, "auto" sends tool_choice auto, False none."""
    body = {"model": model, "messages": messages, "stream": stream, "max_tokens": max_tokens}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = TOOLS
        if force == "auto":
            body["tool_choice"] = "auto"
        elif force:
            body["tool_choice"] = FORCE_BASH
    return body


def first_turn():
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]


def record_chat(base: str, out: pathlib.Path, model: str, overflow: bool):
    cases = {
        "chat-stream-tool": chat(model, first_turn(), True, True, True),
        "chat-json-tool": chat(model, first_turn(), False, True, True),
        "chat-stream-text": chat(model, first_turn(), True, False, False),
        "chat-json-text": chat(model, first_turn(), False, False, False),
        "chat-stream-after-tool": chat(model, AFTER_TOOL, True, True, False),
        # What a `stream: false, tool_choice: auto` provider sends.
        "chat-json-auto-tool": chat(model, first_turn(), False, True, "auto"),
        "chat-json-auto-after-tool": chat(model, AFTER_TOOL, False, True, "auto"),
    }
    if overflow:
        long_turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "word " * 12000}]
        cases["chat-json-overflow"] = chat(model, long_turn, False, True, False)
        cases["chat-stream-overflow"] = chat(model, long_turn, True, True, False)
    for name, body in cases.items():
        save(out, name, body, *post(base, "/v1/chat/completions", body))


def record_messages(base: str, out: pathlib.Path, model: str):
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
    ]
    for name, stream in [("messages-stream-tool", True), ("messages-json-tool", False)]:
        body = {
            "model": model,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": TASK}],
            "tools": tools,
            "tool_choice": {"type": "tool", "name": "bash"},
            "max_tokens": 48,
            "stream": stream,
        }
        save(out, name, body, *post(base, "/v1/messages", body))
    body = {
        "model": model,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": TASK}],
        "max_tokens": 48,
        "stream": True,
    }
    save(out, "messages-stream-text", body, *post(base, "/v1/messages", body))


def record_responses(base: str, out: pathlib.Path, model: str):
    tools = [
        {
            "type": "function",
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "parameters": t["function"]["parameters"],
        }
        for t in TOOLS
    ]
    for name, stream, with_tools in [
        ("responses-stream-tool", True, True),
        ("responses-json-tool", False, True),
        ("responses-stream-text", True, False),
    ]:
        body = {
            "model": model,
            "instructions": SYSTEM,
            "input": [{"role": "user", "content": TASK}],
            "max_output_tokens": 48,
            "stream": stream,
            "store": False,
        }
        if with_tools:
            body["tools"] = tools
            body["tool_choice"] = {"type": "function", "name": "bash"}
        save(out, name, body, *post(base, "/v1/responses", body))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama", required=True)
    parser.add_argument("--litellm", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    record_chat(args.llama, out / "llama-cpp-python", "smollm2", overflow=True)
    lite = out / "litellm"
    record_chat(args.litellm, lite, "smollm2", overflow=False)
    record_messages(args.litellm, lite, "smollm2")
    record_responses(args.litellm, lite, "smollm2-responses")
    # LiteLLM's own errors inside a stream (a mock rate limit).
    body = chat("mock-ratelimit", first_turn(), True, False, False)
    save(lite, "chat-stream-ratelimit", body, *post(args.litellm, "/v1/chat/completions", body))


if __name__ == "__main__":
    main()
