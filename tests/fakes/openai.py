#!/usr/bin/env python3
"""A loopback fake of OpenAI's Chat Completions and Responses APIs with
their automatic prompt cache (stdlib only).

    python3 tests/fakes/openai.py --port 0 --log FILE [--script FILE] [--key KEY]

Serves `POST /v1/chat/completions` and `POST /v1/responses` as OpenAI
documents them: SSE when the body asks `stream: true` (Chat Completions
chunks then `[DONE]`, with a usage chunk when `stream_options.include_usage`
asks; Responses events ending in `response.completed`), else one JSON body.
With `--key`, a request without `Authorization: Bearer KEY` gets 401
`invalid_api_key`. Requests are logged and scripted as gemini.py's (replies
`{"text", "calls": [{"name", "args"}]}` or `{"http": N}`; "done" without a
script).

The cache (`prompt_cache.Implicit`): per model and `prompt_cache_key`, the
longest prefix of whole blocks (tools, instructions, each message or input
item) an earlier request of that model and key sent is read, from 1024
tokens on, in steps of 128, as OpenAI documents it. Usage says so in
`prompt_tokens_details.cached_tokens` (Chat Completions) or
`input_tokens_details.cached_tokens` (Responses), the prompt's tokens
counting every token, cached or not.
"""
import argparse
import json
import sys
import time

import gemini
import prompt_cache


def chat_blocks(body):
    """A Chat Completions prompt as blocks: tools, then each message."""
    return list(body.get("tools") or []) + list(body.get("messages") or [])


def chat_usage(cache, model, body, log, output=12):
    """Chat Completions usage through `cache` (OpenAI's shape; Azure's too),
    recorded beside `log`."""
    total, cached = cache.use((model, body.get("prompt_cache_key")), chat_blocks(body))
    return prompt_cache.record_usage(log, {
        "prompt_tokens": total,
        "completion_tokens": output,
        "total_tokens": total + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    })


def responses_usage(cache, model, body, log, output=12):
    blocks = list(body.get("tools") or [])
    if body.get("instructions"):
        blocks.append({"instructions": body["instructions"]})
    items = body.get("input")
    blocks += items if isinstance(items, list) else [{"role": "user", "content": items}]
    total, cached = cache.use((model, body.get("prompt_cache_key")), blocks)
    return prompt_cache.record_usage(log, {
        "input_tokens": total,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total + output,
    })


def responses_turns(body):
    """The model turns in a Responses input (runs of assistant items)."""
    turns, inside = 0, False
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        mine = item.get("type") in ("function_call", "reasoning") or item.get("role") == "assistant"
        turns += mine and not inside
        inside = mine
    return turns


def chat_events(reply, model, usage):
    created = int(time.time())

    def chunk(delta, finish=None):
        return {"id": "chatcmpl-fake-1", "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.get("text"):
        out.append(chunk({"content": reply["text"]}))
    for i, call in enumerate(reply.get("calls", [])):
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_fake_{i}", "type": "function",
                                          "function": {"name": call["name"], "arguments": json.dumps(call.get("args", {}))}}]}))
    out.append(chunk({}, "tool_calls" if reply.get("calls") else "stop"))
    if usage is not None:
        out.append({"id": "chatcmpl-fake-1", "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": usage})
    return out + ["[DONE]"]


def response_items(reply):
    items = []
    if reply.get("text"):
        items.append({"type": "message", "id": "msg_fake_1", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply["text"], "annotations": []}]})
    for i, call in enumerate(reply.get("calls", [])):
        items.append({"type": "function_call", "id": f"fc_fake_{i}", "call_id": f"call_fake_{i}", "name": call["name"],
                      "arguments": json.dumps(call.get("args", {})), "status": "completed"})
    return items


def response_body(reply, model, usage, status="completed"):
    return {"id": "resp_fake_1", "object": "response", "created_at": int(time.time()), "status": status, "model": model,
            "output": response_items(reply) if status == "completed" else [], "usage": usage if status == "completed" else None,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "store": False}


def responses_events(reply, model, usage):
    seq = iter(range(1 << 30))
    out = [{"type": "response.created", "sequence_number": next(seq), "response": response_body(reply, model, usage, "in_progress")}]
    for index, item in enumerate(response_items(reply)):
        start = dict(item, status="in_progress")
        if item["type"] == "message":
            start["content"] = []
        else:
            start["arguments"] = ""
        out.append({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index, "item": start})
        if item["type"] == "message":
            out.append({"type": "response.content_part.added", "sequence_number": next(seq), "item_id": item["id"],
                        "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
            out.append({"type": "response.output_text.delta", "sequence_number": next(seq), "item_id": item["id"],
                        "output_index": index, "content_index": 0, "delta": item["content"][0]["text"]})
        else:
            out.append({"type": "response.function_call_arguments.delta", "sequence_number": next(seq), "item_id": item["id"],
                        "output_index": index, "delta": item["arguments"]})
            out.append({"type": "response.function_call_arguments.done", "sequence_number": next(seq), "item_id": item["id"],
                        "output_index": index, "arguments": item["arguments"]})
        out.append({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": index, "item": item})
    out.append({"type": "response.completed", "sequence_number": next(seq), "response": response_body(reply, model, usage)})
    return out


def error_body(message, kind, code):
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class Handler(gemini.Handler):
    def handle_other(self, entry):
        fake = self.server.fake
        path = entry["path"]
        if path not in ("/v1/chat/completions", "/v1/responses"):
            self.send_json(404, error_body(f"Invalid URL (POST {path})", "invalid_request_error", None))
            return True
        if fake.key is not None and entry["headers"].get("authorization") != f"Bearer {fake.key}":
            self.send_json(401, error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
            return True
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        model = body.get("model") or ""
        key = body.get("prompt_cache_key")
        if key is not None and (not isinstance(key, str) or len(key) > 64):
            self.send_json(400, error_body("Invalid 'prompt_cache_key': a string of at most 64 characters.", "invalid_request_error", "invalid_value"))
            return True
        chat = path == "/v1/chat/completions"
        turns = {"messages": [{"role": "assistant"}] * responses_turns(body)}
        reply = fake.script.take(body if chat else turns)
        if "http" in reply:
            self.send_json(reply["http"], error_body("scripted failure", "server_error", None))
            return True
        if chat:
            usage = chat_usage(fake.cache, model, body, fake.log)
            if not body.get("stream"):
                events = chat_events(reply, model, usage)
                message = {"role": "assistant", "content": reply.get("text") or None, "refusal": None}
                calls = [e["choices"][0]["delta"]["tool_calls"][0] for e in events[1:-1]
                         if e.get("choices") and "tool_calls" in e["choices"][0]["delta"]]
                if calls:
                    message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
                finish = "tool_calls" if calls else "stop"
                self.send_json(200, {"id": "chatcmpl-fake-1", "object": "chat.completion", "created": int(time.time()), "model": model,
                                     "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}], "usage": usage})
                return True
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            events = chat_events(reply, model, usage if include else None)
        else:
            usage = responses_usage(fake.cache, model, body, fake.log)
            if not body.get("stream"):
                self.send_json(200, response_body(reply, model, usage))
                return True
            events = responses_events(reply, model, usage)
        data = "".join(
            (f"data: {e}\n\n" if isinstance(e, str) else f"event: {e.get('type', 'message')}\ndata: {json.dumps(e)}\n\n"
             if not chat else f"data: {json.dumps(e)}\n\n")
            for e in events
        )
        self.send_whole_stream(data.encode())
        return True


class Fake(gemini.Fake):
    def __init__(self, log, script, key):
        super().__init__(log, script, key)
        self.script.cue = lambda body: {"text": "done"}
        self.cache = prompt_cache.Implicit()


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
