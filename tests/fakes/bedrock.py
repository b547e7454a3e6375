#!/usr/bin/env python3
"""A loopback fake of Amazon Bedrock's ConverseStream (stdlib only).

    python3 tests/fakes/bedrock.py --port 0 --log FILE [--script FILE]
        [--credentials AKID:SECRET[:SESSION_TOKEN]]... [--bearer TOKEN]...

Binds 127.0.0.1, prints its port as the first line of stdout, appends each
request to FILE as one JSON line ({"method", "path", "model", "auth",
"signature_ok", "headers", "body"}), and answers
`POST /model/{modelId}/converse-stream` in AWS event-stream framing.

Every request must be authorized: `Authorization: Bearer TOKEN` with a
token given by --bearer, or AWS SigV4 (service `bedrock`) whose signature
the fake recomputes itself from the secret of the access key id given by
--credentials (and, when that key has a session token, the request's
`X-Amz-Security-Token` must match). Anything else is answered as AWS does:
403 with `x-amzn-errortype: UnrecognizedClientException` (unknown key) or
`InvalidSignatureException` (a signature that does not match).

--script names a JSON file {"replies": [...]}; each request takes the next
reply (past the end: a plain text reply "done"; with "by_turn": true, the
reply the conversation has reached, so one fake serves many runs). A reply
is one of:
  {"text": "...", "tool_use": [{"name", "input", "id"?}], "stop": "end_turn",
   "usage": {"inputTokens", "outputTokens", ...}}  a streamed reply
  {"http_error": {"status", "type", "message"}}     an HTTP error
  {"exception": {"type", "message"}}                 an in-stream exception
                                                     after messageStart
  {"stall_before_headers": SECONDS}                  then the next reply
  {"stall_after_start": SECONDS}                     messageStart, silence
  {"hostile": "bad_crc" | "huge_length" | "unknown_header_type" |
              "lying_length" | "no_stop" | "trickle"}

--hidden-limit N [--hidden-period SECONDS] enforces a limit it never
publishes: N requests per period (default 60 s), refilling evenly from a
full bucket; a request past it is refused 429 `ThrottlingException` with no
Retry-After. Each log line also holds "at" (unix seconds) and "throttled".
The prompt cache (`prompt_cache.Explicit`, one per model id): `cachePoint`
blocks in `toolConfig.tools`, `system` and message contents are the
checkpoints, `ttl` "5m" (default) or "1h". As Bedrock documents it, Claude
caches tools, system and messages; Amazon Nova system and messages (a
cachePoint among Nova's tools is refused); other models cache nothing.
A `ValidationException` answers: a cachePoint for a model that does not
cache, more than four, a ttl other than those two (or "1h" for a model
without the one-hour cache: Claude before 4.5, Nova), or a longer ttl
after a shorter one. A reply without its own "usage" reports the cache's:
`inputTokens` (neither read nor written), `cacheReadInputTokens`,
`cacheWriteInputTokens`.
"""
import argparse
import hashlib
import hmac
import json
import socket
import struct
import sys
import threading
import time
import urllib.parse
import uuid
import zlib

import prompt_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_CREDENTIALS = "AKIDTINYAGENTFAKE:tinyagent/fake/secret+key"


def header_bytes(name, value, kind=7):
    name = name.encode()
    value = value.encode()
    return bytes([len(name)]) + name + bytes([kind]) + struct.pack(">H", len(value)) + value


def frame(headers, payload, *, corrupt_crc=False, total_override=None, raw_headers=None):
    head = raw_headers if raw_headers is not None else b"".join(header_bytes(k, v) for k, v in headers)
    total = 12 + len(head) + len(payload) + 4
    if total_override is not None:
        total = total_override
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + head + payload
    crc = zlib.crc32(message) & 0xFFFFFFFF
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    return message + struct.pack(">I", crc)


def event(kind, body):
    return frame(
        [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        json.dumps(body).encode(),
    )


def exception(kind, message):
    return frame(
        [(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")],
        json.dumps({"message": message}).encode(),
    )


def reply_frames(reply):
    """The frames of a streamed reply (without the hostile ones)."""
    out = [event("messageStart", {"role": "assistant"})]
    index = 0
    text = reply.get("text", "")
    if text:
        for i in range(0, len(text), 7):
            out.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": text[i:i + 7]}}))
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    tools = reply.get("tool_use", [])
    for tool in tools:
        tool_id = tool.get("id") or "tooluse_" + uuid.uuid4().hex[:20]
        out.append(event("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": tool_id, "name": tool["name"]}}}))
        args = json.dumps(tool.get("input", {}))
        for i in range(0, len(args), 9):
            out.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": args[i:i + 9]}}}))
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    stop = reply.get("stop") or ("tool_use" if tools else "end_turn")
    out.append(event("messageStop", {"stopReason": stop}))
    usage = reply.get("usage", {"inputTokens": 120, "outputTokens": 30, "totalTokens": 150})
    out.append(event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}))
    return out


class CacheRefused(ValueError):
    """A request Bedrock refuses for its cache points."""


def caches(model):
    """What a model id caches: "all", "no_tools" (Nova) or None."""
    if "anthropic.claude" in model:
        return "all"
    if "amazon.nova" in model:
        return "no_tools"
    return None


def takes_one_hour(model):
    """Claude Opus, Sonnet and Haiku 4.5 and later."""
    if "anthropic.claude-" not in model:
        return False
    rest = model.split("anthropic.claude-", 1)[1].replace(":", "-").split("-")
    if rest[0] not in ("opus", "sonnet", "haiku"):
        return False
    nums = [int(p) for p in rest[1:3] if p.isdigit() and len(p) <= 2]
    return bool(nums) and (nums[0], nums[1] if len(nums) > 1 else 0) >= (4, 5)


def min_tokens(model):
    if "amazon.nova" in model:
        return 1000
    if any(m in model for m in ("opus-4-5", "opus-4-6", "opus-4-7", "haiku-4-5")):
        return 4096
    if "3-5-haiku" in model:
        return 2048
    return 1024


def converse_blocks(body, model):
    """The prompt as blocks (tools, system, messages) and its checkpoints
    as (index of the block before it, ttl); CacheRefused when Bedrock
    refuses them."""
    blocks, points = [], []
    kind = caches(model)

    def walk(items, where, role=None):
        for item in items or []:
            if isinstance(item, dict) and "cachePoint" in item:
                point = item["cachePoint"] or {}
                if kind is None or (where == "tools" and kind != "all"):
                    raise CacheRefused("You invoked an unsupported model or your request did not allow prompt caching. See the documentation for more information.")
                ttl = point.get("ttl", "5m")
                if point.get("type") != "default" or ttl not in prompt_cache.LIFETIMES:
                    raise CacheRefused(f"Malformed input request: {where}: cachePoint type must be default and ttl 5m or 1h")
                if ttl == "1h" and not takes_one_hour(model):
                    raise CacheRefused("The model does not support the 1h TTL for prompt caching.")
                if not blocks:
                    raise CacheRefused(f"Malformed input request: {where}: a cachePoint must follow content")
                points.append((len(blocks) - 1, ttl))
            else:
                blocks.append(dict(item, role=role) if role and isinstance(item, dict) else item)

    walk((body.get("toolConfig") or {}).get("tools"), "tools")
    walk(body.get("system"), "system")
    for message in body.get("messages") or []:
        walk(message.get("content"), "messages", message.get("role"))
    if len(points) > 4:
        raise CacheRefused(f"Malformed input request: too many cache points: {len(points)} (at most 4)")
    for (_, before), (_, after) in zip(points, points[1:]):
        if prompt_cache.LIFETIMES[after] > prompt_cache.LIFETIMES[before]:
            raise CacheRefused("Malformed input request: cache point TTLs must not increase along tools, system and messages")
    return blocks, points


def sign_key(secret, date, region, service):
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def check_sigv4(method, raw_path, headers, body, credentials):
    """'ok', or the AWS exception type a bad request gets."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "MissingAuthenticationTokenException"
    fields = dict(
        part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(",") if "=" in part
    )
    try:
        akid, date, region, service, terminal = fields["Credential"].split("/")
    except (KeyError, ValueError):
        return "IncompleteSignatureException"
    if akid not in credentials:
        return "UnrecognizedClientException"
    secret, token = credentials[akid]
    if token is not None and headers.get("x-amz-security-token") != token:
        return "UnrecognizedClientException"
    if service != "bedrock" or terminal != "aws4_request":
        return "InvalidSignatureException"
    signed = fields.get("SignedHeaders", "").split(";")
    if "host" not in signed or "x-amz-date" not in signed:
        return "InvalidSignatureException"
    path, _, query = raw_path.partition("?")
    canonical_uri = urllib.parse.quote(path, safe="/~")
    pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in pairs
    )
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed)
    payload_hash = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    if payload_hash != "UNSIGNED-PAYLOAD" and payload_hash != hashlib.sha256(body).hexdigest():
        return "InvalidSignatureException"
    canonical = "\n".join(
        [method, canonical_uri, canonical_query, canonical_headers, ";".join(signed), payload_hash]
    )
    amz_date = headers.get("x-amz-date", "")
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    expected = hmac.new(sign_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        return "InvalidSignatureException"
    return "ok"


class Fake:
    def __init__(self, args):
        self.log = args.log
        self.lock = threading.Lock()
        self.replies = []
        self.by_turn = False
        if args.script:
            with open(args.script) as f:
                loaded = json.load(f)
            self.replies = loaded.get("replies", [])
            self.by_turn = loaded.get("by_turn", False)
        self.credentials = {}
        for entry in args.credentials or [DEFAULT_CREDENTIALS]:
            akid, secret, *token = entry.split(":", 2)
            self.credentials[akid] = (secret, token[0] if token else None)
        self.bearers = set(args.bearer or [])
        # A hidden rate limit (SPEC 24's fakes): `hidden_limit` requests per
        # `hidden_period` seconds, refilling evenly from a full bucket,
        # refused with a ThrottlingException and no Retry-After, as Bedrock
        # refuses past a quota; no rate-limit headers are ever sent.
        self.hidden_limit = args.hidden_limit
        self.hidden_period = args.hidden_period
        self.level = float(args.hidden_limit or 0)
        self.level_at = time.monotonic()
        self.caches = {}

    def admit(self):
        """Takes one request off the hidden bucket; False when it is empty."""
        if not self.hidden_limit:
            return True
        with self.lock:
            now = time.monotonic()
            rate = self.hidden_limit / self.hidden_period
            self.level = min(self.hidden_limit, self.level + (now - self.level_at) * rate)
            self.level_at = now
            if self.level >= 1:
                self.level -= 1
                return True
            return False

    def cache_usage(self, model, body):
        """The request's usage through the model's prompt cache."""
        blocks, points = converse_blocks(body, model)
        with self.lock:
            cache = self.caches.setdefault(model, prompt_cache.Explicit(min_tokens(model)))
        uncached, read, written, _ = cache.use(model, blocks, points)
        usage = {"inputTokens": uncached, "outputTokens": 30, "totalTokens": uncached + read + written + 30}
        if points:
            usage["cacheReadInputTokens"] = read
            usage["cacheWriteInputTokens"] = written
        prompt_cache.record_usage(self.log, usage)
        return usage

    def next_reply(self, body=None):
        """The next reply; with `"by_turn": true` in the script, the one the
        conversation has reached (its count of assistant turns), so one fake
        serves any number of runs."""
        with self.lock:
            if self.by_turn:
                turns = sum(1 for m in (body or {}).get("messages", []) if m.get("role") == "assistant")
                return self.replies[min(turns, len(self.replies) - 1)] if self.replies else {"text": "done"}
            return self.replies.pop(0) if self.replies else {"text": "done"}

    def record(self, entry):
        with self.lock, open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def make_handler(fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def setup(self):
            super().setup()
            # Nagle's algorithm and delayed ACKs would add ~40 ms to a small write.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def error(self, status, kind, message):
            body = json.dumps({"message": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/")
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path
            parts = path.split("?")[0].split("/")
            model = urllib.parse.unquote(parts[2]) if len(parts) == 4 and parts[1] == "model" else None
            auth = headers.get("authorization", "")
            if auth.startswith("Bearer "):
                verdict = "ok" if auth[len("Bearer "):] in fake.bearers else "UnrecognizedClientException"
                kind = "bearer"
            else:
                verdict = check_sigv4("POST", path, headers, body, fake.credentials)
                kind = "sigv4"
            try:
                parsed = json.loads(body or b"null")
            except ValueError:
                parsed = None
            admitted = verdict != "ok" or fake.admit()
            fake.record({
                "method": "POST", "path": path, "model": model, "auth": kind,
                "signature_ok": verdict == "ok", "headers": headers, "body": parsed,
                "at": time.time(), "throttled": not admitted,
            })
            if verdict != "ok":
                message = {
                    "UnrecognizedClientException": "The security token included in the request is invalid.",
                    "InvalidSignatureException": "The request signature we calculated does not match the signature you provided.",
                }.get(verdict, "Authorization is missing or malformed.")
                return self.error(403, verdict, message)
            if not admitted:
                return self.error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
            if model is None or parts[3] != "converse-stream":
                return self.error(404, "UnknownOperationException", "unknown operation")
            if not isinstance(parsed, dict) or not parsed.get("messages"):
                return self.error(400, "ValidationException", "Malformed input request: messages required")
            try:
                usage = fake.cache_usage(model, parsed)
            except CacheRefused as e:
                return self.error(400, "ValidationException", str(e))
            reply = fake.next_reply(parsed)
            if set(reply) <= {"text", "tool_use", "stop"}:
                reply = dict(reply, usage=usage)
            if "stall_before_headers" in reply:
                time.sleep(reply["stall_before_headers"])
                reply = fake.next_reply()
            if "http_error" in reply:
                e = reply["http_error"]
                return self.error(e.get("status", 500), e.get("type", "InternalServerException"), e.get("message", ""))
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            if set(reply) <= {"text", "tool_use", "stop", "usage"}:
                # A whole reply in one write, its length given, the connection kept.
                data = b"".join(reply_frames(reply))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                self.stream(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def send(self, data):
            self.wfile.write(data)
            self.wfile.flush()

        def stream(self, reply):
            start = event("messageStart", {"role": "assistant"})
            if "exception" in reply:
                e = reply["exception"]
                self.send(start)
                self.send(exception(e.get("type", "internalServerException"), e.get("message", "")))
                return
            if "stall_after_start" in reply:
                self.send(start)
                time.sleep(reply["stall_after_start"])
                return
            hostile = reply.get("hostile")
            if hostile == "bad_crc":
                self.send(start)
                self.send(frame([(":event-type", "contentBlockDelta"), (":message-type", "event")],
                                b'{"contentBlockIndex":0,"delta":{"text":"x"}}', corrupt_crc=True))
                return
            if hostile == "huge_length":
                self.send(start)
                self.send(frame([(":message-type", "event")], b"{}", total_override=100 << 20))
                return
            if hostile == "lying_length":
                self.send(start)
                self.send(frame([(":message-type", "event")], b"{}", total_override=8))
                return
            if hostile == "unknown_header_type":
                self.send(start)
                self.send(frame([], b"{}", raw_headers=b"\x01x\x2a"))
                return
            frames = reply_frames(reply)
            if hostile == "no_stop":
                frames = [f for f in frames if b"messageStop" not in f and b"metadata" not in f]
            if hostile == "trickle":
                # Bytes that never complete a frame, one every half second.
                self.send(start)
                for b in frames[1][:-1]:
                    self.send(bytes([b]))
                    time.sleep(0.5)
                return
            for f in frames:
                self.send(f)

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True)
    p.add_argument("--script")
    p.add_argument("--credentials", action="append")
    p.add_argument("--bearer", action="append")
    p.add_argument("--hidden-limit", type=int, default=0, help="requests per --hidden-period, no headers")
    p.add_argument("--hidden-period", type=float, default=60.0, help="seconds")
    args = p.parse_args()
    fake = Fake(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(fake))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
