#!/usr/bin/env python3
"""A loopback fake of the Gemini API (stdlib only).

    python3 tests/fakes/gemini.py --port 0 --log FILE [--script FILE] [--key KEY]

Serves `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` (SSE, one
`GenerateContentResponse` chunk per event, the last one carrying the
candidate's `finishReason` and `usageMetadata`) and `:generateContent` (one
JSON body), as Google documents them. With `--key`, a request whose
`x-goog-api-key` header (or `key` query parameter) is not KEY gets Google's
400 `API_KEY_INVALID`. Each request is appended to FILE as one JSON line:
`{"method", "path", "query", "headers", "body"}` (header names lower-case).

`--script FILE` is a JSON list of replies, one per model request, the last
one repeated once the list is used up. A reply is one of:

    {"text": "...", "calls": [{"name": "bash", "args": {...}}],
     "signature": "c2ln", "finish": "STOP", "usage": {...}}
        a reply streamed in chunks (text in two pieces, then the calls);
        `signature` goes on the first call's part (else on a last, empty
        text part); `finish` defaults to STOP; `finish_message` is sent too
    {"chunks": [{...}, ...]}        these chunks exactly
    {"http": 429, "error": {...}}   an HTTP error with Google's error body
                                    (`error` defaults from the status)
    {"retry_delay": "1s"}           a RESOURCE_EXHAUSTED 429 with RetryInfo
    {"daily_quota": true}           a 429 whose QuotaFailure is per day
    {"stream_error": {...}}         one text chunk, then `{"error": {...}}`
    {"no_finish": true}             text chunks, never a finishReason
    {"stall": SECONDS}              headers, then silence for SECONDS
    {"garbage": true}               a 200 stream of lines that are not JSON

A `text`/`calls` reply without its own "usage" reports the implicit
cache's (`prompt_cache.Implicit`, per model, from 1024 tokens on for Flash
models and 4096 for the others, as Google documents them): the prompt's
`promptTokenCount` (all of it) and `cachedContentTokenCount`, the longest
prefix of whole parts (system instruction, tools, each content) an earlier
request sent.

Without a script each request is answered from cues in its last user text:
`cue:resource_exhausted` (a 429 with a 1s retryDelay), `cue:unavailable`
(503), `cue:stall` (silence for 30 s); anything else is a short text reply.
"""
import argparse
import json
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prompt_cache

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def google_error(status, message=None, details=None):
    error = {
        "code": status,
        "message": message or STATUS_NAMES.get(status, "error").lower().replace("_", " "),
        "status": STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def quota_details(per, retry_delay=None):
    details = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                    "quotaId": f"GenerateRequestsPer{per}PerProjectPerModel-FreeTier",
                    "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                    "quotaValue": "10",
                }
            ],
        },
        {
            "@type": "type.googleapis.com/google.rpc.Help",
            "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}],
        },
    ]
    if retry_delay:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
    return details


def usage_of(reply):
    return reply.get("usage") or {
        "promptTokenCount": 40,
        "candidatesTokenCount": 12,
        "totalTokenCount": 52,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 40}],
    }


def chunk(parts, model, finish=None, usage=None, finish_message=None):
    candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    if finish_message:
        candidate["finishMessage"] = finish_message
    out = {"candidates": [candidate], "modelVersion": model, "responseId": "fake-response-1"}
    if usage:
        out["usageMetadata"] = usage
    return out


def reply_chunks(reply, model):
    """The chunks of a `text`/`calls` reply."""
    if "chunks" in reply:
        return reply["chunks"]
    text = reply.get("text", "")
    calls = reply.get("calls", [])
    signature = reply.get("signature")
    out = []
    if text:
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            if piece:
                out.append(chunk([{"text": piece}], model))
    if reply.get("no_finish"):
        return out or [chunk([{"text": "half a reply"}], model)]
    parts = []
    for i, call in enumerate(calls):
        part = {"functionCall": {"name": call["name"], "args": call.get("args", {})}}
        if signature and i == 0:
            part["thoughtSignature"] = signature
        parts.append(part)
    if signature and not calls:
        parts.append({"text": "", "thoughtSignature": signature})
    out.append(
        chunk(
            parts,
            model,
            finish=reply.get("finish", "STOP"),
            usage=usage_of(reply),
            finish_message=reply.get("finish_message"),
        )
    )
    return out


def whole_body(chunks):
    """The chunks of a streamed reply as one `generateContent` body."""
    parts = []
    last = chunks[-1] if chunks else chunk([], "fake")
    for c in chunks:
        for cand in c.get("candidates", []):
            parts.extend(cand.get("content", {}).get("parts", []))
    body = json.loads(json.dumps(last))
    if body.get("candidates"):
        body["candidates"][0].setdefault("content", {"role": "model"})["parts"] = parts
    return body


def last_user_text(body):
    for content in reversed((body or {}).get("contents", [])):
        if content.get("role") == "user":
            for part in content.get("parts", []):
                if "text" in part:
                    return part["text"]
    return ""


def cue_reply(body):
    text = last_user_text(body)
    if "cue:resource_exhausted" in text:
        return {"retry_delay": "1s"}
    if "cue:unavailable" in text:
        return {"http": 503}
    if "cue:stall" in text:
        return {"stall": 30}
    return {"text": "Hello from the fake Gemini."}


class Script:
    """The replies, in order, the last one repeated. A script file that is
    an object `{"by_turn": true, "replies": [...]}` answers each request
    with the reply its conversation has reached (the count of model turns
    in it), so one fake serves any number of runs (benchmarks)."""

    def __init__(self, path, cue=None):
        self.cue = cue or cue_reply
        loaded = json.load(open(path)) if path else None
        self.by_turn = isinstance(loaded, dict) and loaded.get("by_turn", False)
        self.replies = loaded["replies"] if isinstance(loaded, dict) else loaded
        self.next = 0
        self.lock = threading.Lock()

    def take(self, body):
        if not self.replies:
            return self.cue(body)
        with self.lock:
            index = model_turns(body) if self.by_turn else self.next
            reply = self.replies[min(index, len(self.replies) - 1)]
            self.next += 1
            return reply


def model_turns(body):
    """How many model turns a request's conversation holds (Gemini
    `contents` with role `model`, or `messages` with role `assistant`)."""
    body = body if isinstance(body, dict) else {}
    turns = [c for c in body.get("contents") or [] if c.get("role") == "model"]
    turns += [m for m in body.get("messages") or [] if m.get("role") == "assistant"]
    return len(turns)

def log_request(path, handler, body_bytes):
    url = urllib.parse.urlsplit(handler.path)
    try:
        body = json.loads(body_bytes) if body_bytes else None
    except ValueError:
        body = body_bytes.decode("utf-8", "replace")
    entry = {
        "method": handler.command,
        "path": url.path,
        "query": dict(urllib.parse.parse_qsl(url.query)),
        "headers": {k.lower(): v for k, v in handler.headers.items()},
        "body": body,
    }
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


class Handler(BaseHTTPRequestHandler):
    """Serves Gemini requests; `server.fake` holds the log, script and key."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def setup(self):
        super().setup()
        # Nagle's algorithm and delayed ACKs would add ~40 ms to a small write.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_whole_stream(self, data):
        """A whole stream in one write, its length given, the connection kept
        (as a cloud's front end delivers a short reply; stalls and cuts use
        start_stream)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json; charset=UTF-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def send_event(self, value):
        data = value if isinstance(value, str) else json.dumps(value)
        self.wfile.write(f"data: {data}\r\n\r\n".encode())
        self.wfile.flush()

    def do_POST(self):
        fake = self.server.fake
        raw = self.read_body()
        entry = log_request(fake.log, self, raw)
        if self.handle_other(entry):
            return
        path = entry["path"]
        if ":streamGenerateContent" not in path and ":generateContent" not in path:
            return self.send_json(404, google_error(404, f"no such method: {path}"))
        if not self.authorized(entry):
            return
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        reply = fake.script.take(entry["body"])
        if "usage" not in reply and set(reply) <= {"text", "calls", "signature", "finish", "finish_message"}:
            reply = dict(reply, usage=fake.cache_usage(model, entry["body"]))
        self.answer(reply, model, ":streamGenerateContent" in path)

    def handle_other(self, entry):
        """Requests a subclass serves itself (Vertex: tokens, Claude)."""
        return False

    def authorized(self, entry):
        key = self.server.fake.key
        given = entry["headers"].get("x-goog-api-key") or entry["query"].get("key")
        if key is None or given == key:
            return True
        details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]
        self.send_json(400, google_error(400, "API key not valid. Please pass a valid API key.", details))
        return False

    def answer(self, reply, model, streamed):
        if "retry_delay" in reply:
            msg = "You exceeded your current quota, please check your plan and billing details."
            return self.send_json(429, google_error(429, msg, quota_details("Minute", reply["retry_delay"])))
        if reply.get("daily_quota"):
            msg = "You exceeded your current quota, please check your plan and billing details."
            return self.send_json(429, google_error(429, msg, quota_details("Day", "50s")))
        if "http" in reply:
            return self.send_json(reply["http"], reply.get("error") or google_error(reply["http"]))
        if "stall" in reply:
            self.start_stream()
            time.sleep(reply["stall"])
            return
        if reply.get("garbage"):
            self.start_stream()
            self.send_event("<html>not json</html>")
            return
        chunks = reply_chunks(reply, model)
        if not streamed:
            return self.send_json(200, whole_body(chunks))
        if "stream_error" not in reply:
            return self.send_whole_stream(b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks))
        self.start_stream()
        self.send_event(chunks[0])
        self.send_event({"error": reply["stream_error"]})


class Fake:
    def __init__(self, log, script, key):
        self.log = log
        self.script = Script(script)
        self.key = key
        self.caches = {}
        self.lock = threading.Lock()

    def cache_usage(self, model, body):
        """A request's `usageMetadata` through the model's implicit cache."""
        body = body if isinstance(body, dict) else {}
        with self.lock:
            least = 1024 if "flash" in model else 4096
            cache = self.caches.setdefault(model, prompt_cache.Implicit(min_tokens=least, step=1))
        blocks = [body.get("systemInstruction"), body.get("tools")] + list(body.get("contents") or [])
        total, cached = cache.use(model, [b for b in blocks if b])
        usage = {"promptTokenCount": total, "candidatesTokenCount": 12, "totalTokenCount": total + 12,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}
        if cached:
            usage["cachedContentTokenCount"] = cached
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        prompt_cache.record_usage(self.log, usage)
        return usage


def serve(handler, fake, port):
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.fake = fake
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    parser.add_argument("--key")
    args = parser.parse_args()
    serve(Handler, Fake(args.log, args.script, args.key), args.port)


if __name__ == "__main__":
    sys.exit(main())
