"""Proves tests/fakes/anthropic.py (the Anthropic API and its prompt cache)
against the anthropic SDK: streamed and whole replies, the cache usage read
by the SDK's own types, and the API's cache_control rules."""
import json

import anthropic
import pytest

KEY = "sk-ant-fake"
MODEL = "claude-sonnet-4-5"
LONG = "The project's conventions, repeated for size. " * 250  # ~3,000 tokens
TOOLS = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]


def client(fake):
    return anthropic.Anthropic(api_key=KEY, base_url=fake.url, max_retries=0)


def system(ttl=None):
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return [{"type": "text", "text": LONG, "cache_control": control}]


def test_a_stream_reports_writes_then_reads(start_fake, tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"text": "Looking.", "calls": [{"name": "bash", "args": {"command": "ls"}}]}, {"text": "done"}]))
    fake = start_fake("anthropic", "--key", KEY, "--script", str(path))
    c = client(fake)
    messages = [{"role": "user", "content": [{"type": "text", "text": "list", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]
    with c.messages.stream(model=MODEL, max_tokens=100, system=system("1h"), tools=[dict(TOOLS[0], cache_control={"type": "ephemeral", "ttl": "1h"})], messages=messages) as stream:
        first = stream.get_final_message()
    assert first.content[1].input == {"command": "ls"}
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens > 1024
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens
    second = c.messages.create(model=MODEL, max_tokens=100, system=system(), tools=TOOLS, messages=[
        {"role": "user", "content": [{"type": "text", "text": "list"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
        {"role": "user", "content": [{"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
    ])
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_creation.ephemeral_5m_input_tokens == second.usage.cache_creation_input_tokens
    headers = fake.requests()[0]["headers"]
    assert KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


def test_the_api_rules_on_breakpoints(start_fake):
    fake = start_fake("anthropic", "--key", KEY)
    c = client(fake)
    five = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
        c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": five}])
    with pytest.raises(anthropic.BadRequestError, match="must not come after"):
        c.messages.create(model=MODEL, max_tokens=10, system=system(), messages=[
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}])
    short = c.messages.create(model=MODEL, max_tokens=10, system=[{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
                              messages=[{"role": "user", "content": "hi"}])
    assert short.usage.cache_creation_input_tokens == 0 and short.usage.input_tokens > 0
