#!/usr/bin/env python3
"""A loopback fake of Claude on Microsoft Foundry (stdlib only; the
Messages answer and its prompt cache are anthropic.py's, the script and
server gemini.py's).

    python3 tests/fakes/foundry.py --port 0 --log FILE [--script FILE] [--key KEY] [--entra-token TOKEN]

Serves, as Microsoft and Anthropic document them, under the resource's
base `/anthropic`:
- `POST /anthropic/v1/messages`: Anthropic Messages exactly as on the
  Anthropic API (an `anthropic-version` header and a `model` in the body);
  streamed as Anthropic SSE events when the body asks `stream: true`, else
  one message body. A script reply `{"text", "calls": [{"name", "args"}]}`
  is the model's; `{"http": N}` answers that status with Anthropic's error
  shape (`overloaded_error` for 529, `rate_limit_error` for 429 with a
  `retry-after`, `api_error` otherwise); `{"stall": S}` starts a stream and
  goes silent.
Requests need the key (`--key`) as `x-api-key` (the `api-key` header is
taken too, as Foundry's endpoints do), or with `--entra-token` a bearer
Microsoft Entra ID token; else 401 with Azure's documented body. It also
serves Microsoft Entra ID's token endpoint (entra.py's `--tenant`,
`--client-id`, `--client-secret` ...), whose tokens for `https://ai.azure.com`
it takes.
"""
import argparse
import json
import sys
import time

import anthropic  # the Messages answer with its prompt cache
import entra  # Microsoft Entra ID's token endpoint on the same port
import gemini

# The resource Foundry's Entra ID tokens are for (scope `…/.default`).
AUDIENCE = "https://ai.azure.com"

DENIED = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide "
          "a valid key for an active subscription and use a correct regional API endpoint for your resource.")


def anthropic_error(status):
    kind = {429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error",
            404: "not_found_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"fake {kind}"}}


def last_user_text(body):
    for message in reversed((body or {}).get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            for block in content or []:
                if block.get("type") == "text":
                    return block.get("text", "")
    return ""


def cue_reply(body):
    text = last_user_text(body)
    if "cue:overloaded" in text:
        return {"http": 529}
    return {"text": "Hello from the fake Foundry."}


class Handler(gemini.Handler):
    def handle_other(self, entry):
        fake = self.server.fake
        if fake.entra.handle(self, entry):
            return True
        if entry["path"] != "/anthropic/v1/messages":
            self.send_json(404, {"error": {"code": "404", "message": "Resource not found"}})
            return True
        headers = entry["headers"]
        key = headers.get("x-api-key") or headers.get("api-key")
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        entra_ok = fake.entra.accepts(headers.get("authorization", ""), AUDIENCE)
        if not ((fake.key and key == fake.key) or (fake.entra_token and bearer == fake.entra_token) or entra_ok):
            self.send_json(401, {"error": {"code": "401", "message": DENIED}})
            return True
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        if not headers.get("anthropic-version") or not body.get("model") or not body.get("max_tokens"):
            self.send_json(400, anthropic_error(400))
            return True
        reply = fake.script.take(body)
        if "http" in reply:
            status = reply["http"]
            data = json.dumps(anthropic_error(status)).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status == 429:
                self.send_header("retry-after", "1")
            self.end_headers()
            self.wfile.write(data)
            return True
        if "stall" in reply:
            self.start_stream()
            time.sleep(reply["stall"])
            return True
        fake.messages.answer(self, body, body["model"], reply, "msg_fdry_1")
        return True


class Fake(gemini.Fake):
    def __init__(self, log, script, key, entra_token, entra_state):
        super().__init__(log, script, key)
        self.script = gemini.Script(script, cue_reply)
        self.entra_token = entra_token
        self.entra = entra_state
        self.messages = anthropic.Messages()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    parser.add_argument("--key")
    parser.add_argument("--entra-token")
    entra.Entra.add_arguments(parser)
    args = parser.parse_args()
    fake = Fake(args.log, args.script, args.key, args.entra_token, entra.Entra.from_args(args))
    gemini.serve(Handler, fake, args.port)


if __name__ == "__main__":
    sys.exit(main())
