"""The Azure OpenAI fake (tests/fakes/azure.py) against openai's own SDK:
`AzureOpenAI` on the classic deployment URL with its `api-version` (an
`api-key`, or a Microsoft Entra ID token), `OpenAI` on the `/openai/v1`
base as Microsoft's v1 samples use it; Azure's stream (its first chunk with
empty `choices` and `prompt_filter_results`, tool calls in fragments, the
usage chunk), a whole reply, and Azure's errors as the SDK reads them:
a 429 with `retry-after-ms`, a filtered prompt, a wrong key, a missing
deployment."""
import json
import os

import openai
import pytest
from openai import AzureOpenAI, OpenAI

KEY = "azure-sdk-test-key-0123456789"
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.fake-entra-token"
VERSION = "2024-10-21"
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


def script(fake_dir, replies):
    path = os.path.join(fake_dir, "script.json")
    with open(path, "w") as f:
        json.dump(replies, f)
    return path


def azure(fake, **auth):
    auth = auth or {"api_key": KEY}
    return AzureOpenAI(azure_endpoint=fake.url, api_version=VERSION, max_retries=0, **auth)


@pytest.fixture
def tmp(tmp_path):
    return str(tmp_path)


def test_a_streamed_tool_call_on_the_classic_url(start_fake, tmp):
    replies = [{"text": "Let me look.", "calls": [{"name": "bash", "args": {"command": "ls"}}]}]
    fake = start_fake("azure", "--key", KEY, "--deployment", "prod-chat=gpt-4o-2024-11-20", "--script", script(tmp, replies))
    stream = azure(fake).chat.completions.create(
        model="prod-chat",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "list files"}],
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices == []
    assert chunks[0].prompt_filter_results[0]["prompt_index"] == 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me look."
    arguments = "".join(
        (c.choices[0].delta.tool_calls or [None])[0].function.arguments or ""
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    )
    assert json.loads(arguments) == {"command": "ls"}
    names = [c.choices[0].delta.tool_calls[0].function.name for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert names[0] == "bash"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert chunks[-1].usage.prompt_tokens > 0
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0
    assert chunks[-1].model == "gpt-4o-2024-11-20"
    (req,) = fake.requests()
    assert req["path"] == "/openai/deployments/prod-chat/chat/completions"
    assert req["query"] == {"api-version": VERSION}
    assert req["headers"]["api-key"] == KEY
    assert req["body"]["messages"][0] == {"role": "system", "content": "be brief"}


def test_a_whole_reply_with_an_entra_token(start_fake, tmp):
    fake = start_fake("azure", "--token", TOKEN, "--script", script(tmp, [{"text": "done"}]))
    reply = azure(fake, azure_ad_token=TOKEN).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "done"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 12
    (req,) = fake.requests()
    assert req["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert "api-key" not in req["headers"]


def test_the_v1_base_takes_the_deployment_as_model(start_fake, tmp):
    fake = start_fake("azure", "--key", KEY, "--script", script(tmp, [{"text": "v1 reply"}]))
    sdk = OpenAI(base_url=f"{fake.url}/openai/v1/", api_key=KEY, max_retries=0)
    chunks = list(sdk.chat.completions.create(model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "v1 reply"
    (req,) = fake.requests()
    assert req["path"] == "/openai/v1/chat/completions"
    assert req["query"] == {}
    assert req["body"]["model"] == "gpt-5-mini"


def test_a_429_says_when_to_come_back_in_ms(start_fake, tmp):
    fake = start_fake("azure", "--key", KEY, "--script", script(tmp, [{"http": 429, "retry_after": 2, "retry_after_ms": 1500}]))
    sdk = azure(fake)
    with pytest.raises(openai.RateLimitError) as caught:
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "429"
    headers = caught.value.response.headers
    assert headers["retry-after-ms"] == "1500"
    assert sdk._parse_retry_after_header(headers) == 1.5


def test_a_filtered_prompt_is_a_bad_request_with_its_code(start_fake):
    fake = start_fake("azure", "--key", KEY)
    with pytest.raises(openai.BadRequestError) as caught:
        azure(fake).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "cue:filter"}])
    assert caught.value.code == "content_filter"
    inner = caught.value.body["innererror"]
    assert inner["code"] == "ResponsibleAIPolicyViolation"
    assert inner["content_filter_result"]["violence"] == {"filtered": True, "severity": "high"}


def test_a_filtered_reply_ends_with_content_filter(start_fake, tmp):
    fake = start_fake("azure", "--key", KEY, "--script", script(tmp, [{"content_filter": "reply", "text": "Here is"}]))
    chunks = list(azure(fake).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True))
    last = [c for c in chunks if c.choices][-1]
    assert last.choices[0].finish_reason == "content_filter"


def test_a_wrong_key_and_a_missing_deployment(start_fake):
    fake = start_fake("azure", "--key", KEY, "--deployment", "prod-chat=gpt-4o")
    with pytest.raises(openai.AuthenticationError) as caught:
        azure(fake, api_key="wrong").chat.completions.create(model="prod-chat", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "401"
    with pytest.raises(openai.NotFoundError) as caught:
        azure(fake).chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "DeploymentNotFound"
