#!/usr/bin/env python3
"""A loopback fake of Google Vertex AI with its token endpoint and metadata
server (stdlib only; the Gemini wire form is gemini.py's).

    python3 tests/fakes/vertex.py --port 0 --log FILE [--script FILE] [--token-mode MODE]

Serves, as Google documents them:
- `POST /v1/projects/{p}/locations/{r}/publishers/google/models/{m}:streamGenerateContent?alt=sse`
  (and `:generateContent`): Gemini replies, the script's as in gemini.py;
- `POST …/publishers/anthropic/models/{m}:streamRawPredict` (and
  `:rawPredict`): Anthropic Messages SSE (the body must carry an
  `anthropic_version`, documented as `"vertex-2023-10-16"`, and no `model`); a script reply
  `{"text", "calls": [{"name", "args"}]}` is streamed as Anthropic events,
  with anthropic.py's prompt cache and its usage (`cache_control` rules
  and all, one cache per model);
  `{"http": N}`, `{"retry_delay"}` and `{"stall"}` as in gemini.py;
- `POST /token`: an OAuth token endpoint taking a service account's signed
  JWT (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`) or a
  refresh token; answers `{"access_token": "ya29.fake-<n>", "expires_in":
  3600, "token_type": "Bearer"}`;
- workload identity federation as `google-github-actions/auth` sets it
  up: `GET /oidc?audience=…` (GitHub's OIDC token endpoint: needs
  `Authorization: Bearer gh-request-token`, answers `{"value": JWT}`),
  `POST /sts/v1/token` (Google STS, RFC 8693: a token exchange of a subject
  token this fake issued, with the cloud-platform scope (or, before an
  impersonation, the iam scope, as google-auth asks), answers a federated
  `ya29.fed-<n>` access token) and `POST
  /v1/projects/-/serviceAccounts/{email}:generateAccessToken` (IAM
  Credentials: a bearer token this fake issued, answers `{"accessToken",
  "expireTime"}`);
- `GET /computeMetadata/v1/instance/service-accounts/default/token` and
  `GET /computeMetadata/v1/project/project-id` (`Metadata-Flavor: Google`
  required), a metadata server.
Model requests need `Authorization: Bearer ya29.fake-…` (one the token
endpoint handed out), else 401 UNAUTHENTICATED.

`--token-mode`: `ok` (default), `refuse` (400 invalid_grant), `hang` (never
answers), `garbage` (200 with a body that is not JSON).
"""
import argparse
import base64
import json
import sys
import threading
import time
import urllib.parse

import anthropic
import gemini

ISSUED = set()
SUBJECTS = set()
LOCK = threading.Lock()
OIDC_REQUEST_TOKEN = "gh-request-token"
TOKEN_SCOPES = {"https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/iam"}


def issue(prefix):
    with LOCK:
        token = f"{prefix}-{len(ISSUED) + len(SUBJECTS) + 1}"
        ISSUED.add(token)
    return token


class Handler(gemini.Handler):
    def do_GET(self):
        entry = gemini.log_request(self.server.fake.log, self, b"")
        path = entry["path"]
        if path == "/oidc":
            return self.send_oidc(entry)
        if entry["headers"].get("metadata-flavor") != "Google":
            return self.send_json(403, {"error": "Metadata-Flavor: Google is required"})
        if path == "/computeMetadata/v1/project/project-id":
            data = b"fake-metadata-project"
            self.send_response(200)
            self.send_header("content-type", "application/text")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            return self.send_token()
        self.send_json(404, {"error": "not found"})

    def send_oidc(self, entry):
        if entry["headers"].get("authorization") != f"Bearer {OIDC_REQUEST_TOKEN}":
            return self.send_json(401, {"message": "Bad credentials"})
        claims = {"iss": "https://token.actions.githubusercontent.com", "aud": entry["query"].get("audience", ""),
                  "sub": "repo:tinyagent/tinyagent:ref:refs/heads/main", "exp": int(time.time()) + 300}
        part = lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()
        with LOCK:
            jwt = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl{len(SUBJECTS)}"
            SUBJECTS.add(jwt)
        self.send_json(200, {"count": 1, "value": jwt})

    def send_sts(self, form):
        with LOCK:
            known = form.get("subject_token") in SUBJECTS
        if (form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange"
                or form.get("requested_token_type") != "urn:ietf:params:oauth:token-type:access_token"
                or not TOKEN_SCOPES & set(form.get("scope", "").split())
                or not form.get("audience")
                or not form.get("subject_token_type")):
            return self.send_json(400, {"error": "invalid_request", "error_description": "Invalid token exchange request."})
        if not known:
            return self.send_json(400, {"error": "invalid_grant", "error_description": "The subject token is invalid."})
        self.send_json(200, {"access_token": issue("ya29.fed"), "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                             "token_type": "Bearer", "expires_in": 3600})

    def send_impersonated(self, entry):
        auth = entry["headers"].get("authorization", "")
        with LOCK:
            known = auth.removeprefix("Bearer ") in ISSUED
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        if not known:
            return self.send_json(401, gemini.google_error(401, "Request had invalid authentication credentials."))
        if not any("cloud-platform" in s for s in body.get("scope") or []):
            return self.send_json(400, gemini.google_error(400, "Scope required."))
        expire = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        self.send_json(200, {"accessToken": issue("ya29.imp"), "expireTime": expire})

    def send_token(self):
        mode = self.server.fake.token_mode
        if mode == "hang":
            time.sleep(60)
            return
        if mode == "refuse":
            return self.send_json(400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        if mode == "garbage":
            data = b"<html>oops</html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        self.send_json(200, {"access_token": issue("ya29.fake"), "expires_in": 3600, "token_type": "Bearer"})

    def handle_other(self, entry):
        path = entry["path"]
        if path == "/sts/v1/token":
            self.send_sts(dict(urllib.parse.parse_qsl(entry["body"] if isinstance(entry["body"], str) else "")))
            return True
        if path.startswith("/v1/projects/-/serviceAccounts/") and path.endswith(":generateAccessToken"):
            self.send_impersonated(entry)
            return True
        if path == "/token":
            form = dict(urllib.parse.parse_qsl(entry["body"] if isinstance(entry["body"], str) else ""))
            grant = form.get("grant_type")
            if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
                parts = form.get("assertion", "").split(".")
                try:
                    claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
                except (IndexError, ValueError):
                    self.send_json(400, {"error": "invalid_grant", "error_description": "not a JWT"})
                    return True
                if len(parts) != 3 or not TOKEN_SCOPES & set(claims.get("scope", "").split()) or not claims.get("iss"):
                    self.send_json(400, {"error": "invalid_grant", "error_description": "bad claims"})
                    return True
            elif grant == "refresh_token":
                if not form.get("refresh_token"):
                    self.send_json(400, {"error": "invalid_grant"})
                    return True
            else:
                self.send_json(400, {"error": "unsupported_grant_type"})
                return True
            self.send_token()
            return True
        if "/publishers/" not in path:
            return False
        auth = entry["headers"].get("authorization", "")
        with LOCK:
            known = auth.removeprefix("Bearer ") in ISSUED
        if not known:
            self.send_json(401, gemini.google_error(401, "Request had invalid authentication credentials."))
            return True
        if "/publishers/anthropic/" in path:
            self.answer_claude(entry)
            return True
        return False

    def authorized(self, entry):
        return True

    def answer_claude(self, entry):
        body = entry["body"] or {}
        # Vertex's documented version is vertex-2023-10-16; newer SDKs send
        # dated ones, which Vertex takes too.
        if not body.get("anthropic_version") or "model" in body:
            return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic_version is required; model is not allowed"}})
        model = entry["path"].rsplit("/", 1)[-1].split(":", 1)[0]
        reply = self.server.fake.script.take(body)
        if "retry_delay" in reply or "http" in reply:
            return self.answer(reply, model, True)
        if "stall" in reply:
            self.start_stream()
            time.sleep(reply["stall"])
            return
        if ":rawPredict" in entry["path"]:
            return self.send_json(400, {"error": "only streamed here"})
        self.server.fake.messages.answer(self, dict(body, stream=True), model, reply, "msg_vrtx_1")


class Fake(gemini.Fake):
    def __init__(self, log, script, token_mode):
        super().__init__(log, script, None)
        self.token_mode = token_mode
        self.messages = anthropic.Messages()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--script")
    parser.add_argument("--token-mode", default="ok", choices=["ok", "refuse", "hang", "garbage"])
    args = parser.parse_args()
    gemini.serve(Handler, Fake(args.log, args.script, args.token_mode), args.port)


if __name__ == "__main__":
    sys.exit(main())
