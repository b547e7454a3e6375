"""The Vertex AI fake (tests/fakes/vertex.py) against the vendors' SDKs:
anthropic's AnthropicVertex (Claude through :streamRawPredict) and
google-genai in Vertex mode (Gemini), both authorizing with a service
account key whose token_uri is the fake's own token endpoint."""
import json
import os
import pathlib

import pytest
from anthropic import AnthropicVertex
from google import genai
from google.genai import types
from google.oauth2 import service_account

KEY = (pathlib.Path(__file__).resolve().parent.parent / "fakes/fixtures/throwaway-service-account.pem").read_text()
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def credentials(fake):
    info = {
        "type": "service_account",
        "project_id": "sdk-project",
        "private_key_id": "k1",
        "private_key": KEY,
        "client_email": "sdk@sdk-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{fake.url}/token",
    }
    return service_account.Credentials.from_service_account_info(info, scopes=SCOPES)


def script(tmp_path, replies):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies))
    return str(path)


def test_anthropic_vertex_streams_claude_with_a_jwt_token(start_fake, tmp_path):
    replies = [{"text": "hello", "calls": [{"name": "bash", "args": {"command": "ls"}}]}]
    fake = start_fake("vertex", "--script", script(tmp_path, replies))
    client = AnthropicVertex(region="us-east5", project_id="sdk-project", credentials=credentials(fake), base_url=f"{fake.url}/v1")
    with client.messages.stream(
        model="claude-sonnet-4-5@20250929",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": "bash", "description": "run", "input_schema": {"type": "object"}}],
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == "hello"
    assert message.content[1].name == "bash"
    assert message.content[1].input == {"command": "ls"}
    assert message.stop_reason == "tool_use"
    reqs = [r for r in fake.requests() if "/publishers/" in r["path"]]
    assert reqs[0]["path"] == "/v1/projects/sdk-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    assert reqs[0]["body"]["anthropic_version"]
    assert "model" not in reqs[0]["body"]
    assert reqs[0]["headers"]["authorization"].startswith("Bearer ya29.fake-")
    tokens = [r for r in fake.requests() if r["path"] == "/token"]
    assert "jwt-bearer" in tokens[0]["body"]


def test_google_genai_on_vertex_streams_gemini(start_fake, tmp_path):
    replies = [{"text": "from vertex", "calls": [{"name": "bash", "args": {"command": "pwd"}}], "signature": "c2ln"}]
    fake = start_fake("vertex", "--script", script(tmp_path, replies))
    client = genai.Client(
        vertexai=True,
        project="sdk-project",
        location="us-east5",
        credentials=credentials(fake),
        http_options=types.HttpOptions(base_url=fake.url, api_version="v1"),
    )
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="hi"))
    text = "".join(p.text for c in chunks for p in (c.candidates[0].content.parts or []) if p.text)
    assert text == "from vertex"
    call = chunks[-1].candidates[0].content.parts[0]
    assert call.function_call.name == "bash"
    assert call.thought_signature == b"sig"
    reqs = [r for r in fake.requests() if "/publishers/" in r["path"]]
    assert reqs[0]["path"] == "/v1/projects/sdk-project/locations/us-east5/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    assert reqs[0]["query"] == {"alt": "sse"}


def test_a_request_without_a_token_is_unauthenticated(start_fake):
    import urllib.error
    import urllib.request

    fake = start_fake("vertex")
    request = urllib.request.Request(
        f"{fake.url}/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent",
        data=b"{}",
        headers={"content-type": "application/json", "authorization": "Bearer forged"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["status"] == "UNAUTHENTICATED"


def github_actions_credentials(fake, impersonate):
    """The external_account file google-github-actions/auth writes, pointed at the fake."""
    info = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/github/providers/tinyagent",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": f"{fake.url}/sts/v1/token",
        "credential_source": {
            "url": f"{fake.url}/oidc?api-version=2.0&audience=https%3A%2F%2Fiam.googleapis.com%2Fprojects%2F123456789",
            "headers": {"Authorization": "Bearer gh-request-token"},
            "format": {"type": "json", "subject_token_field_name": "value"},
        },
    }
    if impersonate:
        info["service_account_impersonation_url"] = (
            f"{fake.url}/v1/projects/-/serviceAccounts/ci@wif-project.iam.gserviceaccount.com:generateAccessToken")
    return info


@pytest.mark.parametrize("impersonate", [True, False])
def test_google_auth_federates_a_github_oidc_token_through_sts(start_fake, tmp_path, impersonate):
    from google.auth import identity_pool

    fake = start_fake("vertex", "--script", script(tmp_path, [{"text": "federated"}]))
    creds = identity_pool.Credentials.from_info(github_actions_credentials(fake, impersonate), scopes=SCOPES)
    client = genai.Client(
        vertexai=True,
        project="wif-project",
        location="us-east5",
        credentials=creds,
        http_options=types.HttpOptions(base_url=fake.url, api_version="v1"),
    )
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="hi"))
    assert "".join(p.text for c in chunks for p in (c.candidates[0].content.parts or []) if p.text) == "federated"
    paths = [r["path"] for r in fake.requests()]
    expected = ["/oidc", "/sts/v1/token"]
    if impersonate:
        expected.append("/v1/projects/-/serviceAccounts/ci@wif-project.iam.gserviceaccount.com:generateAccessToken")
    assert paths[: len(expected)] == expected
    model = [r for r in fake.requests() if "/publishers/" in r["path"]][0]
    assert model["headers"]["authorization"].startswith("Bearer ya29.imp-" if impersonate else "Bearer ya29.fed-")


def test_google_auth_impersonates_a_service_account_at_iam_credentials(start_fake):
    """generateAccessToken as gcloud's impersonated_service_account file
    uses it (google-auth reads only the account from such a file's URL and
    asks Google's host, so the endpoint is given here)."""
    from google.auth import impersonated_credentials
    from google.auth.transport.requests import Request

    fake = start_fake("vertex")
    url = f"{fake.url}/v1/projects/-/serviceAccounts/ci@wif-project.iam.gserviceaccount.com:generateAccessToken"
    creds = impersonated_credentials.Credentials(
        source_credentials=credentials(fake),
        target_principal="ci@wif-project.iam.gserviceaccount.com",
        target_scopes=SCOPES,
        iam_endpoint_override=url,
    )
    creds.refresh(Request())
    assert creds.token.startswith("ya29.imp-")
    paths = [r["path"] for r in fake.requests()]
    assert paths == ["/token", "/v1/projects/-/serviceAccounts/ci@wif-project.iam.gserviceaccount.com:generateAccessToken"]
