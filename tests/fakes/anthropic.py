#!/usr/bin/env python3
"""A loopback fake of the Anthropic Messages API with its prompt cache
(stdlib only).

    python3 tests/fakes/anthropic.py --port 0 --log FILE [--script FILE] [--key KEY]

Serves `POST /v1/messages` as Anthropic documents it: SSE when the body asks
`stream: true`, else one message body. With `--key`, a request whose
`x-api-key` (or bearer token) is not KEY gets 401 `authentication_error`. Requests are logged
as gemini.py logs them; the script's replies are gemini.py's Script (a list,
or `{"by_turn": true, "replies": [...]}`), each `{"text", "calls": [{"name",
"args"}]}` or `{"http": N}`; without a script every reply is "done".

The prompt cache (`prompt_cache.Explicit`, one per model, since a key is
the account's): `cache_control` blocks on tools, system blocks and message
blocks are the breakpoints, `ttl` "5m" (default) or "1h". As the API does,
more than four breakpoints, a `ttl` other than those two, or a 1h
breakpoint after a 5m one is a 400 `invalid_request_error`; a prefix
shorter than the model's minimum is not cached (no error). The usage
reports `input_tokens` (neither read nor written),
`cache_read_input_tokens`, `cache_creation_input_tokens` and
`cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`.
"""
import argparse
import json
import sys

import gemini
import prompt_cache

MAX_BREAKPOINTS = 4


def min_tokens(model):
    """The smallest prefix the model caches, as Anthropic documents it."""
    if any(m in model for m in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if "haiku-3" in model or "3-5-haiku" in model or "3-haiku" in model:
        return 2048
    return 1024


class CacheError(ValueError):
    """A request the API refuses for its cache_control blocks."""


def prompt_blocks(body):
    """The prompt as blocks in the API's order (tools, system, messages),
    `cache_control` taken out, and its breakpoints as (index, ttl)."""
    blocks, points = [], []

    def add(block, where):
        if isinstance(block, dict) and "cache_control" in block:
            block = dict(block)
            control = block.pop("cache_control") or {}
            ttl = control.get("ttl", "5m")
            if ttl not in prompt_cache.LIFETIMES:
                raise CacheError(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
            points.append((len(blocks), ttl))
        blocks.append(block)

    for i, tool in enumerate(body.get("tools") or []):
        add(tool, f"tools.{i}")
    system = body.get("system")
    if isinstance(system, str) and system:
        blocks.append({"type": "text", "text": system})
    for i, block in enumerate(system if isinstance(system, list) else []):
        add(block, f"system.{i}")
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for j, block in enumerate(content or []):
            tagged = dict(block, role=message.get("role")) if isinstance(block, dict) else block
            add(tagged, f"messages.{i}.content.{j}")
    if len(points) > MAX_BREAKPOINTS:
        raise CacheError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(points)}."
        )
    seen_short = False
    for _, ttl in points:
        if ttl == "5m":
            seen_short = True
        elif seen_short:
            raise CacheError(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
            )
    return blocks, points


def usage(uncached, read, written, written_1h, output=1):
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": written - written_1h,
            "ephemeral_1h_input_tokens": written_1h,
        },
        "output_tokens": output,
    }


def reply_blocks(reply):
    blocks = []
    if reply.get("text"):
        blocks.append({"type": "text", "text": reply["text"]})
    for n, call in enumerate(reply.get("calls", [])):
        blocks.append({"type": "tool_use", "id": f"toolu_fake_{n}", "name": call["name"], "input": call.get("args", {})})
    return blocks


def anthropic_events(reply, model, start_usage=None, msg_id="msg_fake_1"):
    """A reply as Anthropic Messages SSE events."""

    def ev(kind, **fields):
        fields["type"] = kind
        return f"event: {kind}\ndata: {json.dumps(fields)}\n\n"

    start_usage = start_usage or {"input_tokens": 30, "output_tokens": 1}
    out = [ev("message_start", message={"id": msg_id, "type": "message", "role": "assistant", "content": [], "model": model, "stop_reason": None, "stop_sequence": None, "usage": start_usage})]
    for index, block in enumerate(reply_blocks(reply)):
        if block["type"] == "text":
            out.append(ev("content_block_start", index=index, content_block={"type": "text", "text": ""}))
            out.append(ev("content_block_delta", index=index, delta={"type": "text_delta", "text": block["text"]}))
        else:
            out.append(ev("content_block_start", index=index, content_block=dict(block, input={})))
            out.append(ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])}))
        out.append(ev("content_block_stop", index=index))
    stop = "tool_use" if reply.get("calls") else "end_turn"
    out.append(ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 10}))
    out.append(ev("message_stop"))
    return out


def error_body(kind, message):
    return {"type": "error", "error": {"type": kind, "message": message}}


class Messages:
    """What the Anthropic API and Claude on Vertex share: a Messages body
    answered with its cache usage, one cache per model."""

    def __init__(self):
        self.caches = {}

    def cache_for(self, model):
        return self.caches.setdefault(model, prompt_cache.Explicit(min_tokens(model)))

    def answer(self, handler, body, model, reply, msg_id):
        try:
            blocks, points = prompt_blocks(body)
        except CacheError as e:
            return handler.send_json(400, error_body("invalid_request_error", str(e)))
        uncached, read, written, written_1h = self.cache_for(model).use(model, blocks, points)
        start = usage(uncached, read, written, written_1h)
        prompt_cache.record_usage(handler.server.fake.log, start)
        if not body.get("stream"):
            stop = "tool_use" if reply.get("calls") else "end_turn"
            return handler.send_json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                           "content": reply_blocks(reply), "stop_reason": stop, "stop_sequence": None,
                                           "usage": dict(start, output_tokens=10)})
        handler.send_whole_stream("".join(anthropic_events(reply, model, start, msg_id)).encode())


class Handler(gemini.Handler):
    def handle_other(self, entry):
        fake = self.server.fake
        if entry["path"] != "/v1/messages":
            self.send_json(404, error_body("not_found_error", f"no such path: {entry['path']}"))
            return True
        # The SDKs send `x-api-key`; newer ones a bearer token, which the API takes too.
        headers = entry["headers"]
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if fake.key is not None and given != fake.key:
            self.send_json(401, error_body("authentication_error", "invalid x-api-key"))
            return True
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        model = body.get("model") or ""
        if not model or not body.get("messages") or not body.get("max_tokens"):
            self.send_json(400, error_body("invalid_request_error", "model, messages and max_tokens are required"))
            return True
        reply = fake.script.take(body)
        if "http" in reply:
            self.send_json(reply["http"], error_body("api_error", "scripted failure"))
            return True
        fake.messages.answer(self, body, model, reply, "msg_fake_1")
        return True


class Fake(gemini.Fake):
    def __init__(self, log, script, key):
        super().__init__(log, script, key)
        self.script.cue = lambda body: {"text": "done"}
        self.messages = Messages()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    parser.add_argument("--key")
    args = parser.parse_args()
    gemini.serve(Handler, Fake(args.log, args.script, args.key), args.port)


if __name__ == "__main__":
    sys.exit(main())
