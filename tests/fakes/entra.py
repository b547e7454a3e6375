#!/usr/bin/env python3
"""A loopback fake of Microsoft Entra ID's token endpoint and of Azure's
managed identity endpoints (stdlib only).

    python3 tests/fakes/entra.py --port 0 --log FILE [--tenant T]
        [--client-id C] [--client-secret S] [--cert PEM]
        [--federated TOKEN ...] [--identity-header H] [--lifetime SECONDS]
        [--mode ok|refuse|hang|unavailable] [--tls-cert PEM --tls-key PEM]

Serves, as Microsoft documents them:
- `GET /{tenant}/v2.0/.well-known/openid-configuration` (what MSAL reads
  to find the token endpoint);
- `POST /{tenant}/oauth2/v2.0/token`, the client credentials grant with a
  client secret (`client_secret`) or a client assertion
  (`client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`):
  either a JWT signed RS256 by the key of `--cert` (checked as Entra checks
  it: the `x5t` thumbprint names the certificate, the signature verifies
  with its public key, `aud` is this token endpoint, `iss` and `sub` are
  the client id, `exp` is ahead, a `jti`), or a federated token given with
  `--federated` (workload identity: a JWT whose `aud` is
  `api://AzureADTokenExchange`). The scope must end in `/.default`.
  Answers `{"token_type": "Bearer", "expires_in", "ext_expires_in",
  "access_token"}`; refusals are Entra's `{"error", "error_description":
  "AADSTS…", "error_codes", …}`;
- `GET /msi/token?api-version=2019-08-01&resource=…` with
  `X-IDENTITY-HEADER` (App Service's managed identity endpoint, for
  `IDENTITY_ENDPOINT`): `{"access_token", "expires_on", "resource",
  "token_type", "client_id"}`;
- `GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=…`
  with `Metadata: true` (the instance metadata service, for
  `AZURE_POD_IDENTITY_AUTHORITY_HOST`).

`--mode`: `ok`; `refuse` (every grant refused: AADSTS7000215); `hang`
(never answers); `unavailable` (503). `--lifetime` is each token's
`expires_in` (default 3599). `--tls-cert`/`--tls-key` serve HTTPS (the
Azure SDKs take only an https authority). azure.py serves all of this on
its own port too and takes the tokens issued here (`Entra.accepts`).
"""
import argparse
import base64
import hashlib
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"
SHA256_PREFIX = bytes.fromhex("3031300d060960864801650304020105000420")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def der_children(data):
    """The (tag, value) items of a DER sequence's contents."""
    out, i = [], 0
    while i < len(data):
        tag, length = data[i], data[i + 1]
        i += 2
        if length & 0x80:
            n = length & 0x7F
            length = int.from_bytes(data[i : i + n], "big")
            i += n
        out.append((tag, data[i : i + length]))
        i += length
    return out


def certificate_of(pem_text):
    """(DER, n, e) of the first certificate in a PEM text."""
    body = pem_text.split("-----BEGIN CERTIFICATE-----", 1)[1].split("-----END CERTIFICATE-----", 1)[0]
    der = base64.b64decode("".join(body.split()))
    (_, cert), = der_children(der)[:1]
    tbs = der_children(der_children(cert)[0][1])
    if tbs[0][0] == 0xA0:  # the explicit version
        tbs = tbs[1:]
    spki = der_children(tbs[5][1])
    bits = spki[1][1][1:]  # the BIT STRING, past its unused-bits byte
    (_, n), (_, e) = der_children(der_children(bits)[0][1])
    return der, int.from_bytes(n, "big"), int.from_bytes(e, "big")


def rs256_verifies(signing_input, signature, n, e):
    k = (n.bit_length() + 7) // 8
    if len(signature) != k:
        return False
    em = pow(int.from_bytes(signature, "big"), e, n).to_bytes(k, "big")
    digest = SHA256_PREFIX + hashlib.sha256(signing_input).digest()
    return em == b"\x00\x01" + b"\xff" * (k - 3 - len(digest)) + b"\x00" + digest


def jwt_parts(token):
    try:
        head, claims, sig = token.split(".")
        return json.loads(unb64url(head)), json.loads(unb64url(claims)), unb64url(sig), f"{head}.{claims}".encode()
    except (ValueError, TypeError):
        return None


def entra_error(status, error, code, text):
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())
    return status, {
        "error": error,
        "error_description": f"AADSTS{code}: {text}\r\nTrace ID: 0000\r\nCorrelation ID: 0000\r\nTimestamp: {stamp}",
        "error_codes": [code],
        "timestamp": stamp,
        "trace_id": "0000",
        "correlation_id": "0000",
        "error_uri": f"https://login.microsoftonline.com/error?code={code}",
    }


class Entra:
    """The tenant's app registration, the managed identity, and the tokens issued."""

    def __init__(self, tenant="fake-tenant", client_id=None, client_secret=None, cert=None,
                 federated=(), identity_header=None, lifetime=3599, mode="ok", expire_after=None):
        self.tenant = tenant
        self.client_id = client_id
        self.client_secret = client_secret
        self.cert = None
        if cert:
            with open(cert) as f:
                der, n, e = certificate_of(f.read())
            self.cert = (b64url(hashlib.sha1(der).digest()), n, e)
        self.federated = set(federated)
        self.identity_header = identity_header
        self.lifetime = lifetime
        self.mode = mode
        self.expire_after = expire_after
        self.issued = {}
        self.lock = threading.Lock()

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--tenant", default="fake-tenant")
        parser.add_argument("--client-id")
        parser.add_argument("--client-secret")
        parser.add_argument("--cert")
        parser.add_argument("--federated", action="append", default=[])
        parser.add_argument("--identity-header")
        parser.add_argument("--lifetime", type=int, default=3599)
        parser.add_argument("--mode", default="ok", choices=["ok", "refuse", "hang", "unavailable"])
        parser.add_argument("--expire-after", type=int, help="a token is answered as expired after this many uses")

    @classmethod
    def from_args(cls, args):
        return cls(args.tenant, args.client_id, args.client_secret, args.cert, args.federated,
                   args.identity_header, args.lifetime, args.mode, args.expire_after)

    def issue(self, audience):
        with self.lock:
            n = len(self.issued) + 1
            token = f"eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-fake-{n}.c2ln"
            self.issued[token] = {"expires": time.time() + self.lifetime, "audience": audience, "uses": 0}
        return token

    def accepts(self, bearer, audience):
        """Whether `Bearer <token>` is a live token of this fake for `audience`."""
        token = bearer.removeprefix("Bearer ")
        with self.lock:
            entry = self.issued.get(token)
            if entry is None or entry["audience"] != audience or time.time() >= entry["expires"]:
                return False
            entry["uses"] += 1
            return self.expire_after is None or entry["uses"] <= self.expire_after

    def handle(self, handler, entry):
        """Answers `entry` when it is one of this fake's paths; False otherwise."""
        path = entry["path"]
        parts = path.strip("/").split("/")
        if handler.command == "GET" and path.endswith("/v2.0/.well-known/openid-configuration"):
            base = self.base(handler)
            tenant = parts[0]
            return handler.send_json(200, {
                "token_endpoint": f"{base}/{tenant}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/authorize",
                "device_authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/devicecode",
                "issuer": f"{base}/{tenant}/v2.0",
                "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
            }) or True
        if handler.command == "POST" and len(parts) == 4 and parts[1:] == ["oauth2", "v2.0", "token"]:
            self.token(handler, entry, parts[0])
            return True
        if handler.command == "GET" and path == "/msi/token":
            self.app_service(handler, entry)
            return True
        if handler.command == "GET" and path == "/metadata/identity/oauth2/token":
            self.imds(handler, entry)
            return True
        return False

    @staticmethod
    def base(handler):
        scheme = "https" if getattr(handler.server, "tls", False) else "http"
        return f"{scheme}://{handler.headers.get('host')}"

    def unavailable(self, handler):
        if self.mode == "hang":
            time.sleep(60)
            return True
        if self.mode == "unavailable":
            handler.send_json(503, {"error": "temporarily_unavailable"})
            return True
        return False

    def token(self, handler, entry, tenant):
        if self.unavailable(handler):
            return
        raw = entry["body"] if isinstance(entry["body"], str) else ""
        form = dict(urllib.parse.parse_qsl(raw))
        status, reply = self.grant(handler, form, tenant)
        handler.send_json(status, reply)

    def grant(self, handler, form, tenant):
        client = form.get("client_id", "")
        if tenant != self.tenant:
            return entra_error(400, "invalid_request", 90002, f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.")
        if form.get("grant_type") != "client_credentials":
            return entra_error(400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type.")
        if self.client_id is not None and client != self.client_id:
            return entra_error(400, "unauthorized_client", 700016, f"Application with identifier '{client}' was not found in the directory '{tenant}'.")
        scope = form.get("scope", "")
        if not scope.endswith("/.default"):
            return entra_error(400, "invalid_scope", 1002012, f"The provided value for scope {scope} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).")
        if self.mode == "refuse":
            return entra_error(401, "invalid_client", 7000215, f"Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '{client}'.")
        if "client_secret" in form:
            if self.client_secret is None or form["client_secret"] != self.client_secret:
                return entra_error(401, "invalid_client", 7000215, f"Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '{client}'.")
        elif form.get("client_assertion_type") == ASSERTION_TYPE:
            problem = self.assertion_problem(form.get("client_assertion", ""), client, f"{self.base(handler)}/{tenant}/oauth2/v2.0/token")
            if problem:
                return problem
        else:
            return entra_error(401, "invalid_client", 7000218, "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.")
        token = self.issue(scope[: -len("/.default")])
        return 200, {"token_type": "Bearer", "expires_in": self.lifetime, "ext_expires_in": self.lifetime, "access_token": token}

    def assertion_problem(self, assertion, client, audience):
        if assertion in self.federated:
            parsed = jwt_parts(assertion)
            claims = parsed[1] if parsed else {}
            if claims.get("aud") not in (EXCHANGE_AUDIENCE, [EXCHANGE_AUDIENCE]) or claims.get("exp", 0) < time.time():
                return entra_error(400, "invalid_request", 700024, "Client assertion is not within its valid time range.")
            return None
        parsed = jwt_parts(assertion)
        if parsed is None:
            return entra_error(400, "invalid_request", 50027, "JWT token is invalid or malformed.")
        header, claims, signature, signing_input = parsed
        # MSAL pads its base64url thumbprint; RFC 7515 does not: both name it.
        if self.cert is None or str(header.get("x5t", "")).rstrip("=") != self.cert[0]:
            if header.get("alg") == "RS256" and "x5t" in header:
                return entra_error(401, "invalid_client", 700027, "The certificate with identifier used to sign the client assertion is not registered on application.")
            return entra_error(400, "invalid_request", 70021, "No matching federated identity record found for presented assertion.")
        if header.get("alg") != "RS256" or not rs256_verifies(signing_input, signature, self.cert[1], self.cert[2]):
            return entra_error(401, "invalid_client", 700027, "Client assertion contains an invalid signature.")
        now = time.time()
        if claims.get("aud") != audience:
            return entra_error(401, "invalid_client", 700212, f"No matching federated identity record found for presented assertion audience '{claims.get('aud')}'.")
        if claims.get("iss") != client or claims.get("sub") != client:
            return entra_error(401, "invalid_client", 700023, "Client assertion audience claim does not match Realm issuer.")
        if not claims.get("jti") or claims.get("exp", 0) < now or claims.get("nbf", 0) > now + 300:
            return entra_error(401, "invalid_client", 700024, "Client assertion is not within its valid time range.")
        return None

    def app_service(self, handler, entry):
        if self.unavailable(handler):
            return
        query, headers = entry["query"], entry["headers"]
        if self.identity_header is None or headers.get("x-identity-header") != self.identity_header:
            return handler.send_json(401, {"statusCode": 401, "message": "Unauthorized: the X-IDENTITY-HEADER is missing or does not match."})
        if query.get("api-version") != "2019-08-01" or not query.get("resource"):
            return handler.send_json(400, {"statusCode": 400, "message": "api-version 2019-08-01 and a resource are required."})
        if self.mode == "refuse":
            return handler.send_json(400, {"statusCode": 400, "message": "No managed identity found for specified ClientId/ResourceId/PrincipalId."})
        resource = query["resource"]
        handler.send_json(200, {"access_token": self.issue(resource), "expires_on": str(int(time.time()) + self.lifetime),
                                "resource": resource, "token_type": "Bearer", "client_id": query.get("client_id", "fake-system-identity")})

    def imds(self, handler, entry):
        if self.unavailable(handler):
            return
        query = entry["query"]
        if entry["headers"].get("metadata") != "true":
            return handler.send_json(400, {"error": "invalid_request", "error_description": "Required metadata header not specified"})
        if not query.get("api-version") or not query.get("resource"):
            return handler.send_json(400, {"error": "invalid_request", "error_description": "Required query variable 'resource' is missing"})
        if self.mode == "refuse":
            return handler.send_json(400, {"error": "invalid_request", "error_description": "Identity not found"})
        resource = query["resource"]
        now = int(time.time())
        handler.send_json(200, {"access_token": self.issue(resource), "refresh_token": "", "expires_in": str(self.lifetime),
                                "expires_on": str(now + self.lifetime), "not_before": str(now), "resource": resource,
                                "token_type": "Bearer"})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def serve(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        entry = log_request(self.server.log, self, raw)
        if not self.server.entra.handle(self, entry):
            self.send_json(404, {"error": "not_found"})

    do_GET = serve
    do_POST = serve


def log_request(path, handler, body_bytes):
    """Appends the request to the log as one JSON line and returns it."""
    url = urllib.parse.urlsplit(handler.path)
    try:
        body = json.loads(body_bytes) if body_bytes else None
    except ValueError:
        body = body_bytes.decode("utf-8", "replace")
    entry = {
        "method": handler.command,
        "path": url.path,
        "query": dict(urllib.parse.parse_qsl(url.query)),
        "headers": {k.lower(): v for k, v in handler.headers.items()},
        "body": body,
    }
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    Entra.add_arguments(parser)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.log = args.log
    server.entra = Entra.from_args(args)
    server.tls = bool(args.tls_cert)
    if args.tls_cert:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
