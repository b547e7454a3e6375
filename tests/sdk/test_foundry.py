"""The Foundry fake (tests/fakes/foundry.py) against anthropic's own
AnthropicFoundry client: its key headers (x-api-key, and api-key too), the
base it makes of a resource (here given whole as base_url), streamed and
unstreamed Messages, an Entra ID token provider, and a refused key."""
import json

import anthropic
import pytest
from anthropic import AnthropicFoundry

TOOLS = [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}]


def script(tmp_path, replies):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies))
    return str(path)


def test_anthropic_foundry_streams_claude_with_its_key(start_fake, tmp_path):
    replies = [{"text": "hello", "calls": [{"name": "bash", "args": {"command": "ls"}}]}]
    fake = start_fake("foundry", "--script", script(tmp_path, replies), "--key", "fdry-key")
    client = AnthropicFoundry(api_key="fdry-key", base_url=f"{fake.url}/anthropic/")
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS,
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == "hello"
    assert message.content[1].input == {"command": "ls"}
    assert message.stop_reason == "tool_use"
    req = fake.requests()[0]
    assert req["path"] == "/anthropic/v1/messages"
    assert req["headers"]["x-api-key"] == "fdry-key"
    assert req["headers"]["api-key"] == "fdry-key"
    assert "authorization" not in req["headers"]
    assert req["headers"]["anthropic-version"]
    assert req["body"]["model"] == "claude-sonnet-4-5"


def test_an_unstreamed_message_and_an_entra_token(start_fake, tmp_path):
    fake = start_fake("foundry", "--script", script(tmp_path, [{"text": "whole"}]), "--entra-token", "eyJ.entra")
    client = AnthropicFoundry(azure_ad_token_provider=lambda: "eyJ.entra", base_url=f"{fake.url}/anthropic")
    message = client.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "whole"
    assert message.usage.output_tokens == 10
    assert fake.requests()[0]["headers"]["authorization"] == "Bearer eyJ.entra"


def test_a_wrong_key_is_refused_and_an_overload_is_anthropics(start_fake, tmp_path):
    fake = start_fake("foundry", "--script", script(tmp_path, [{"http": 529}]), "--key", "right")
    wrong = AnthropicFoundry(api_key="wrong", base_url=f"{fake.url}/anthropic", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    right = AnthropicFoundry(api_key="right", base_url=f"{fake.url}/anthropic", max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as raised:
        right.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 529
