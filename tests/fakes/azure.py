#!/usr/bin/env python3
"""A loopback fake of Azure OpenAI's Chat Completions (stdlib only).

    python3 tests/fakes/azure.py --port 0 --log FILE [--script FILE]
        [--key KEY] [--token TOKEN] [--deployment NAME=MODEL ...]

Serves both URL forms as Azure documents them:

    POST /openai/v1/chat/completions                       (the deployment is `model`)
    POST /openai/deployments/{deployment}/chat/completions?api-version=...

A classic request without `api-version` gets Azure's 404 "Resource not
found". With `--key`, a request must carry `api-key: KEY` (the v1 form also
takes `Authorization: Bearer KEY`, as Microsoft's v1 samples send it); with
`--token`, `Authorization: Bearer TOKEN` (a Microsoft Entra ID token) is
taken too; anything else gets Azure's 401. With `--deployment NAME=MODEL`
(repeatable) only those deployments exist (else Azure's 404
`DeploymentNotFound`) and replies name MODEL as their `model`; without it
every deployment exists and is its own model.

Replies stream as Azure streams them (`stream: true`): a first chunk with
empty `choices` and the prompt's `prompt_filter_results`, then
`chat.completion.chunk`s whose choices carry `content_filter_results`, the
finish chunk, a usage chunk when `stream_options.include_usage` asks for one,
then `data: [DONE]`. `stream: false` gets one `chat.completion` body. A
`text`/`calls` reply without its own "usage" reports the prompt cache's as
openai.py does (per model and `prompt_cache_key`, which Microsoft documents
on `/openai/v1`): `prompt_tokens_details.cached_tokens`. Each
request is appended to FILE as one JSON line: `{"method", "path", "query",
"headers", "body"}` (header names lower-case).

`--script FILE` is a JSON list of replies, one per model request, the last
one repeated once the list is used up. A reply is one of:

    {"text": "...", "calls": [{"name": "bash", "args": {...}}],
     "finish": "stop", "usage": {...}}
        text in two pieces, then each call (its id and name, then its
        arguments in two fragments); `finish` defaults to tool_calls with
        calls, else stop
    {"http": 429, "retry_after": 1, "retry_after_ms": 1000, "error": {...}}
        an HTTP error in Azure's shape (`{"error": {"code": "429", ...}}`,
        defaulted from the status), with those headers when given
    {"content_filter": "prompt"}    Azure's 400 `content_filter` refusal
    {"content_filter": "reply", "text": "..."}
        the text, then a finish chunk with `finish_reason: content_filter`
        and the category that was filtered
    {"stream_error": {...}}         one text chunk, then `{"error": {...}}`
    {"no_done": true, "text": ...}  the chunks, never `[DONE]`
    {"stall": SECONDS}              headers, then silence for SECONDS

Microsoft Entra ID and the managed identity endpoints are served on the
same port (entra.py: `--tenant`, `--client-id`, `--client-secret`,
`--cert`, `--federated`, `--identity-header`, `--lifetime`, `--mode`,
`--expire-after`), so that one fake is `AZURE_AUTHORITY_HOST`,
`IDENTITY_ENDPOINT` (`…/msi/token`) and the resource at once; a model
request then also takes `Authorization: Bearer <a token issued here for
https://cognitiveservices.azure.com>` until it expires (or after
`--expire-after` uses, when it is answered 401 as expired).

Without a script each request is answered from cues in its last user text:
`cue:429` (a 429 with retry-after 1), `cue:503`, `cue:filter` (a filtered
prompt); anything else is a short text reply.
"""
import argparse
import json
import socket
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import entra  # Microsoft Entra ID and the managed identity endpoints
import gemini  # the script of replies, shared
import openai  # Chat Completions usage through the prompt cache, shared
import prompt_cache

AUDIENCE = "https://cognitiveservices.azure.com"

SAFE = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}

MESSAGES = {
    400: "Invalid request.",
    401: "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
    404: "Resource not found",
    429: "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 1 second.",
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The service is temporarily unable to process your request. Please try again later.",
}


def azure_error(status, message=None, code=None):
    return {"error": {"code": code or str(status), "message": message or MESSAGES.get(status, "error")}}


def content_filter_error():
    return {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {
                    "hate": {"filtered": False, "severity": "safe"},
                    "jailbreak": {"filtered": False, "detected": False},
                    "self_harm": {"filtered": False, "severity": "safe"},
                    "sexual": {"filtered": False, "severity": "safe"},
                    "violence": {"filtered": True, "severity": "high"},
                },
            },
        }
    }


def usage_of(reply):
    return reply.get("usage") or {
        "completion_tokens": 12,
        "prompt_tokens": 40,
        "total_tokens": 52,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


class Chunks:
    """Builds one reply's `chat.completion.chunk`s."""

    def __init__(self, model):
        self.model = model
        self.created = int(time.time())

    def chunk(self, delta, finish=None, filters=None):
        choice = {"content_filter_results": SAFE if filters is None else filters, "delta": delta, "finish_reason": finish, "index": 0, "logprobs": None}
        return {
            "choices": [choice],
            "created": self.created,
            "id": "chatcmpl-fake-azure-1",
            "model": self.model,
            "object": "chat.completion.chunk",
            "system_fingerprint": "fp_fake",
        }

    def usage(self, usage):
        return {
            "choices": [],
            "created": self.created,
            "id": "chatcmpl-fake-azure-1",
            "model": self.model,
            "object": "chat.completion.chunk",
            "system_fingerprint": "fp_fake",
            "usage": usage,
        }


def prompt_filter_chunk():
    """Azure's first event: no choices, the prompt's filter results."""
    return {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": SAFE}],
    }


def finish_of(reply):
    if "finish" in reply:
        return reply["finish"]
    if reply.get("content_filter") == "reply":
        return "content_filter"
    return "tool_calls" if reply.get("calls") else "stop"


def reply_chunks(reply, model, include_usage):
    """The events of a `text`/`calls` reply, `[DONE]` included."""
    build = Chunks(model)
    out = [prompt_filter_chunk(), build.chunk({"content": "", "refusal": None, "role": "assistant"}, filters={})]
    text = reply.get("text", "")
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        if piece:
            out.append(build.chunk({"content": piece}))
    if "stream_error" in reply:
        return out[:3] + [{"error": reply["stream_error"]}]
    for i, call in enumerate(reply.get("calls", [])):
        args = json.dumps(call.get("args", {}))
        head = {"index": i, "id": call.get("id", f"call_fake_{i}"), "type": "function", "function": {"name": call["name"], "arguments": ""}}
        out.append(build.chunk({"tool_calls": [head]}, filters={}))
        cut = len(args) // 2
        for piece in (args[:cut], args[cut:]):
            out.append(build.chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, filters={}))
    if reply.get("no_done"):
        return out
    filters = {}
    if reply.get("content_filter") == "reply":
        filters = dict(SAFE, violence={"filtered": True, "severity": "high"})
    out.append(build.chunk({}, finish=finish_of(reply), filters=filters))
    if include_usage:
        out.append(build.usage(usage_of(reply)))
    out.append("[DONE]")
    return out


def whole_body(reply, model):
    """A reply as one `chat.completion` body (`stream: false`)."""
    message = {"content": reply.get("text") or None, "refusal": None, "role": "assistant"}
    calls = [
        {"id": call.get("id", f"call_fake_{i}"), "type": "function", "function": {"name": call["name"], "arguments": json.dumps(call.get("args", {}))}}
        for i, call in enumerate(reply.get("calls", []))
    ]
    if calls:
        message["tool_calls"] = calls
    return {
        "choices": [{"content_filter_results": SAFE, "finish_reason": finish_of(reply), "index": 0, "logprobs": None, "message": message}],
        "created": int(time.time()),
        "id": "chatcmpl-fake-azure-1",
        "model": model,
        "object": "chat.completion",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": SAFE}],
        "system_fingerprint": "fp_fake",
        "usage": usage_of(reply),
    }


def last_user_text(body):
    for message in reversed((body or {}).get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content or ""
    return ""


def cue_reply(body):
    text = last_user_text(body)
    if "cue:429" in text:
        return {"http": 429, "retry_after": 1}
    if "cue:503" in text:
        return {"http": 503}
    if "cue:filter" in text:
        return {"content_filter": "prompt"}
    return {"text": "Hello from the fake Azure OpenAI."}

log_request = gemini.log_request


class Handler(BaseHTTPRequestHandler):
    """Serves Azure OpenAI requests; `server.fake` holds the log, script and credentials."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def setup(self):
        super().setup()
        # Nagle's algorithm and delayed ACKs would add ~40 ms to a small write.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, value, headers=()):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("apim-request-id", "fake-apim-1")
        for name, header in headers:
            self.send_header(name, header)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("connection", "close")
        self.send_header("x-ratelimit-remaining-requests", "99")
        self.send_header("x-ratelimit-remaining-tokens", "99000")
        self.end_headers()
        self.close_connection = True

    def send_event(self, value):
        data = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def do_GET(self):
        entry = log_request(self.server.fake.log, self, b"")
        if not self.server.fake.entra.handle(self, entry):
            self.send_json(404, azure_error(404))

    def do_POST(self):
        fake = self.server.fake
        raw = self.read_body()
        entry = log_request(fake.log, self, raw)
        if fake.entra.handle(self, entry):
            return
        path = entry["path"]
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        if path == "/openai/v1/chat/completions":
            deployment, v1 = body.get("model", ""), True
        elif path.startswith("/openai/deployments/") and path.endswith("/chat/completions"):
            deployment, v1 = path[len("/openai/deployments/") : -len("/chat/completions")], False
            if "api-version" not in entry["query"]:
                return self.send_json(404, azure_error(404))
        else:
            return self.send_json(404, azure_error(404))
        if not self.authorized(entry["headers"], v1):
            if entry["headers"].get("authorization", "").startswith("Bearer eyJ"):
                # Azure's answer to an Entra ID token it does not take.
                message = f"Unauthorized. Access token is missing, invalid, audience is incorrect ({AUDIENCE}), or have expired."
                return self.send_json(401, azure_error(401, message, "401"))
            return self.send_json(401, azure_error(401))
        model = fake.model_of(deployment)
        if model is None:
            message = "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."
            return self.send_json(404, azure_error(404, message, "DeploymentNotFound"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        reply = fake.script.take(body)
        if "usage" not in reply and set(reply) <= {"text", "calls", "finish"}:
            reply = dict(reply, usage=openai.chat_usage(fake.cache, model, body, fake.log))
        self.answer(reply, model, body.get("stream", False), include_usage)

    def authorized(self, headers, v1):
        fake = self.server.fake
        bearer = headers.get("authorization", "")
        if fake.entra.accepts(bearer, AUDIENCE):
            return True
        if fake.key is None and fake.token is None and not fake.entra.issued:
            return True
        if fake.key is not None and (headers.get("api-key") == fake.key or (v1 and bearer == f"Bearer {fake.key}")):
            return True
        return fake.token is not None and bearer == f"Bearer {fake.token}"

    def answer(self, reply, model, streamed, include_usage):
        if "http" in reply:
            status = reply["http"]
            headers = []
            if "retry_after" in reply:
                headers.append(("retry-after", str(reply["retry_after"])))
            if "retry_after_ms" in reply:
                headers.append(("retry-after-ms", str(reply["retry_after_ms"])))
            return self.send_json(status, reply.get("error") or azure_error(status), headers)
        if reply.get("content_filter") == "prompt":
            return self.send_json(400, content_filter_error())
        if "stall" in reply:
            self.start_stream()
            time.sleep(reply["stall"])
            return
        if not streamed:
            return self.send_json(200, whole_body(reply, model))
        # The whole stream in one write, its length given, the connection kept.
        data = b"".join(f"data: {e if isinstance(e, str) else json.dumps(e, separators=(',', ':'))}\n\n".encode()
                        for e in reply_chunks(reply, model, include_usage))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-ratelimit-remaining-requests", "99")
        self.send_header("x-ratelimit-remaining-tokens", "99000")
        self.end_headers()
        self.wfile.write(data)


class Fake:
    def __init__(self, log, script, key, token, deployments, entra_state):
        self.entra = entra_state
        self.log = log
        self.script = gemini.Script(script, cue_reply)
        self.key = key
        self.token = token
        self.deployments = dict(d.split("=", 1) for d in deployments) if deployments else None
        self.cache = prompt_cache.Implicit()

    def model_of(self, deployment):
        if not deployment:
            return None
        if self.deployments is None:
            return deployment
        return self.deployments.get(deployment)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    parser.add_argument("--key")
    parser.add_argument("--token")
    parser.add_argument("--deployment", action="append", default=[])
    entra.Entra.add_arguments(parser)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.fake = Fake(args.log, args.script, args.key, args.token, args.deployment, entra.Entra.from_args(args))
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
