"""Proves tests/fakes/bedrock.py against boto3's own `bedrock-runtime`
client: SigV4 signing checked by the fake, ConverseStream's event-stream
replies parsed by botocore, exceptions raised as their documented types."""
import json

import boto3
import botocore.config
import botocore.exceptions
import pytest

AKID = "AKIDTINYAGENTFAKE"
SECRET = "tinyagent/fake/secret+key"
MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def client(fake, secret=SECRET):
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=fake.url,
        aws_access_key_id=AKID,
        aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def script(tmp_path, replies):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"replies": replies}))
    return str(path)


def converse(c, **extra):
    return c.converse_stream(
        modelId=MODEL,
        system=[{"text": "be brief"}],
        messages=[{"role": "user", "content": [{"text": "list files"}]}],
        inferenceConfig={"maxTokens": 100},
        toolConfig={"tools": [{"toolSpec": {"name": "bash", "description": "run", "inputSchema": {"json": {"type": "object"}}}}]},
        **extra,
    )


def test_a_tool_call_streams_and_the_signature_checks(start_fake, tmp_path):
    fake = start_fake("bedrock", "--script", script(tmp_path, [
        {"text": "Looking.", "tool_use": [{"name": "bash", "input": {"command": "ls"}, "id": "tooluse_1"}]},
    ]))
    events = list(converse(client(fake))["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
    args = "".join(e["contentBlockDelta"]["delta"].get("toolUse", {}).get("input", "") for e in events if "contentBlockDelta" in e)
    assert text == "Looking."
    assert json.loads(args) == {"command": "ls"}
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["start"]["toolUse"] == {"toolUseId": "tooluse_1", "name": "bash"}
    assert events[-2]["messageStop"]["stopReason"] == "tool_use"
    assert events[-1]["metadata"]["usage"]["inputTokens"] > 0
    (req,) = fake.requests()
    assert req["signature_ok"] and req["auth"] == "sigv4"
    assert req["model"] == MODEL
    assert req["body"]["toolConfig"]["tools"][0]["toolSpec"]["name"] == "bash"


def test_a_wrong_secret_is_refused_as_aws_does(start_fake):
    fake = start_fake("bedrock")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        converse(client(fake, secret="wrong"))
    assert e.value.response["Error"]["Code"] == "InvalidSignatureException"


def test_http_errors_carry_their_exception_type(start_fake, tmp_path):
    fake = start_fake("bedrock", "--script", script(tmp_path, [
        {"http_error": {"status": 429, "type": "ThrottlingException", "message": "Too many requests, please wait before trying again."}},
        {"http_error": {"status": 400, "type": "ValidationException", "message": "Input is too long for requested model."}},
    ]))
    c = client(fake)
    with pytest.raises(c.exceptions.ThrottlingException):
        converse(c)
    with pytest.raises(c.exceptions.ValidationException) as e:
        converse(c)
    assert "too long" in str(e.value)


def test_in_stream_exceptions_are_raised_as_their_type(start_fake, tmp_path):
    fake = start_fake("bedrock", "--script", script(tmp_path, [
        {"exception": {"type": "throttlingException", "message": "slow down"}},
        {"exception": {"type": "modelStreamErrorException", "message": "boom"}},
    ]))
    c = client(fake)
    with pytest.raises(botocore.exceptions.EventStreamError) as e:
        list(converse(c)["stream"])
    assert e.value.response["Error"]["Code"] == "throttlingException"
    with pytest.raises(botocore.exceptions.EventStreamError) as e:
        list(converse(c)["stream"])
    assert e.value.response["Error"]["Code"] == "modelStreamErrorException"


def test_a_session_token_is_required_when_the_key_has_one(start_fake):
    fake = start_fake("bedrock", "--credentials", f"{AKID}:{SECRET}:the-session-token")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        converse(client(fake))
    assert e.value.response["Error"]["Code"] == "UnrecognizedClientException"
    c = boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url,
        aws_access_key_id=AKID, aws_secret_access_key=SECRET, aws_session_token="the-session-token",
    )
    assert list(converse(c)["stream"])


LONG = "Each tool's output is kept in the conversation. " * 200  # ~2,500 tokens


def cached_converse(c, model=MODEL, ttl=None, tools_point=True):
    point = {"cachePoint": {"type": "default", **({"ttl": ttl} if ttl else {})}}
    tools = [{"toolSpec": {"name": "bash", "description": "run", "inputSchema": {"json": {"type": "object"}}}}]
    return c.converse_stream(
        modelId=model,
        system=[{"text": LONG}, point],
        messages=[{"role": "user", "content": [{"text": "list files"}, point]}],
        inferenceConfig={"maxTokens": 100},
        toolConfig={"tools": tools + ([point] if tools_point else [])},
    )


def usage_of(response):
    return [e for e in response["stream"] if "metadata" in e][0]["metadata"]["usage"]


def test_cache_points_are_taken_written_then_read(start_fake):
    fake = start_fake("bedrock")
    c = client(fake)
    first = usage_of(cached_converse(c, ttl="1h"))
    assert first["cacheWriteInputTokens"] > 1024 and first["cacheReadInputTokens"] == 0
    second = usage_of(cached_converse(c, ttl="1h"))
    assert second["cacheReadInputTokens"] == first["cacheWriteInputTokens"]
    assert second["cacheWriteInputTokens"] == 0
    body = fake.requests()[0]["body"]
    assert body["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}
    assert body["system"][-1] == {"cachePoint": {"type": "default", "ttl": "1h"}}


def test_cache_points_bedrock_refuses(start_fake):
    fake = start_fake("bedrock")
    c = client(fake)
    with pytest.raises(c.exceptions.ValidationException):
        cached_converse(c, model="meta.llama3-70b-instruct-v1:0")
    with pytest.raises(c.exceptions.ValidationException):
        cached_converse(c, model="us.amazon.nova-pro-v1:0")  # no cachePoint among Nova's tools
    nova = usage_of(cached_converse(c, model="us.amazon.nova-pro-v1:0", tools_point=False))
    assert nova["cacheWriteInputTokens"] > 1000
    with pytest.raises(c.exceptions.ValidationException):
        c.converse_stream(
            modelId=MODEL,
            system=[{"text": LONG}, {"cachePoint": {"type": "default"}}],
            messages=[{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default", "ttl": "1h"}}]}],
        )
