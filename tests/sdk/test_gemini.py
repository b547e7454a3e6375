"""The Gemini API fake (tests/fakes/gemini.py) against Google's own SDK,
google-genai: streamed and whole replies, function calls with their thought
signatures, and Google's error bodies as the SDK reads them."""
import json
import os

import pytest
from google import genai
from google.genai import errors, types

KEY = "gemini-sdk-test-key"


def client(fake):
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=fake.url, api_version="v1beta"))


def script(fake_dir, replies):
    path = os.path.join(fake_dir, "script.json")
    with open(path, "w") as f:
        json.dump(replies, f)
    return path


@pytest.fixture
def tmp(tmp_path):
    return str(tmp_path)


def test_a_streamed_function_call_with_its_signature(start_fake, tmp):
    replies = [{"text": "Let me look.", "calls": [{"name": "bash", "args": {"command": "ls"}}], "signature": "c2lnLTE="}]
    fake = start_fake("gemini", "--key", KEY, "--script", script(tmp, replies))
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(name="bash", description="run", parameters_json_schema={"type": "object"})])
    sdk = client(fake)
    chunks = list(
        sdk.models.generate_content_stream(
            model="gemini-2.5-flash",
            contents="list files",
            config=types.GenerateContentConfig(tools=[tool], system_instruction="be brief", max_output_tokens=100),
        )
    )
    text = "".join(c.text or "" for c in chunks if c.candidates and any(p.text for p in c.candidates[0].content.parts or []))
    assert text == "Let me look."
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    call_part = last.candidates[0].content.parts[0]
    assert call_part.function_call.name == "bash"
    assert call_part.function_call.args == {"command": "ls"}
    assert call_part.thought_signature == b"sig-1"
    assert last.usage_metadata.prompt_token_count > 0
    (req,) = fake.requests()
    assert req["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert req["query"] == {"alt": "sse"}
    assert req["headers"]["x-goog-api-key"] == KEY
    body = req["body"]
    assert body["systemInstruction"]["parts"][0]["text"] == "be brief"
    declaration = body["tools"][0]["functionDeclarations"][0]
    # Google's JSON parsing takes a field's proto name as well as its camelCase one.
    schema = declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))
    assert schema == {"type": "object"}
    assert body["generationConfig"]["maxOutputTokens"] == 100


def test_a_whole_reply_and_a_signature_sent_back(start_fake, tmp):
    replies = [{"text": "done"}]
    fake = start_fake("gemini", "--key", KEY, "--script", script(tmp, replies))
    history = [
        types.Content(role="user", parts=[types.Part(text="go")]),
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name="bash", args={"command": "ls"}), thought_signature=b"sig-1")]),
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(name="bash", response={"result": "a.txt"}))]),
    ]
    sdk = client(fake)
    reply = sdk.models.generate_content(model="gemini-2.5-flash", contents=history)
    assert reply.text == "done"
    (req,) = fake.requests()
    assert req["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    contents = req["body"]["contents"]
    assert contents[1]["parts"][0]["thoughtSignature"] == "c2lnLTE="
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"result": "a.txt"}


def test_resource_exhausted_carries_its_retry_delay(start_fake, tmp):
    fake = start_fake("gemini", "--key", KEY, "--script", script(tmp, [{"retry_delay": "38s"}]))
    sdk = client(fake)
    with pytest.raises(errors.ClientError) as caught:
        sdk.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert caught.value.code == 429
    assert caught.value.status == "RESOURCE_EXHAUSTED"
    details = caught.value.details["error"]["details"]
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "38s"} in details


def test_a_wrong_key_is_refused_as_google_does(start_fake):
    fake = start_fake("gemini", "--key", KEY)
    bad = genai.Client(api_key="wrong", http_options=types.HttpOptions(base_url=fake.url, api_version="v1beta"))
    with pytest.raises(errors.ClientError) as caught:
        bad.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert caught.value.code == 400
    assert caught.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"


def test_unavailable_is_a_server_error(start_fake):
    fake = start_fake("gemini", "--key", KEY)
    sdk = client(fake)
    with pytest.raises(errors.ServerError) as caught:
        sdk.models.generate_content(model="gemini-2.5-flash", contents="cue:unavailable")
    assert caught.value.code == 503
