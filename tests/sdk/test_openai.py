"""Proves tests/fakes/openai.py (Chat Completions, Responses and their
automatic prompt cache) against the openai SDK: prompt_cache_key is sent
and scopes the cache, cached tokens are read by the SDK's own types."""
import openai
import pytest

KEY = "sk-fake"
LONG = "The project's conventions, repeated for size. " * 250  # ~3,000 tokens


def client(fake):
    return openai.OpenAI(api_key=KEY, base_url=f"{fake.url}/v1", max_retries=0)


def chat(c, key, extra=""):
    stream = c.chat.completions.create(
        model="gpt-5", stream=True, stream_options={"include_usage": True}, prompt_cache_key=key,
        messages=[{"role": "system", "content": LONG}, {"role": "user", "content": "list files" + extra}],
    )
    return [chunk for chunk in stream][-1].usage


def test_chat_completions_caches_per_key(start_fake):
    fake = start_fake("openai", "--key", KEY)
    c = client(fake)
    first = chat(c, "tinyagent-run-a")
    assert first.prompt_tokens > 1024 and first.prompt_tokens_details.cached_tokens == 0
    again = chat(c, "tinyagent-run-a", " and more")
    assert again.prompt_tokens_details.cached_tokens >= 1024
    assert again.prompt_tokens_details.cached_tokens % 128 == 0
    other = chat(c, "tinyagent-run-b")
    assert other.prompt_tokens_details.cached_tokens == 0
    assert fake.requests()[0]["body"]["prompt_cache_key"] == "tinyagent-run-a"


def test_responses_caches_and_reports_it(start_fake):
    fake = start_fake("openai", "--key", KEY)
    c = client(fake)
    for n in range(2):
        response = c.responses.create(model="gpt-5", instructions=LONG, input="list files", prompt_cache_key="k", store=False)
    assert response.output_text == "done"
    assert response.usage.input_tokens_details.cached_tokens >= 1024
    with c.responses.stream(model="gpt-5", instructions=LONG, input="list files", prompt_cache_key="k") as stream:
        final = stream.get_final_response()
    assert final.usage.input_tokens_details.cached_tokens >= 1024
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model="gpt-5", input="x", prompt_cache_key="k" * 65)
