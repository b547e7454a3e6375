"""The Microsoft Entra ID and managed identity fake (tests/fakes/entra.py)
against azure-identity's own credential classes: `ClientSecretCredential`,
`CertificateCredential` (a client assertion signed with the certificate's
key, `x5t` naming it), `ClientAssertionCredential` and
`WorkloadIdentityCredential` (a federated token), each at the fake's
authority; `ManagedIdentityCredential` through App Service's
`IDENTITY_ENDPOINT`/`IDENTITY_HEADER` and through the instance metadata
service at `AZURE_POD_IDENTITY_AUTHORITY_HOST`; and Entra's refusals as the
SDK reads them. The SDK takes only an https authority, so the fake serves
TLS with a certificate made here for 127.0.0.1 (trusted through
`REQUESTS_CA_BUNDLE`); tinyagent's tests use its http form on loopback."""
import base64
import datetime
import ipaddress
import json
import os
import pathlib
import time

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import (
    CertificateCredential,
    ClientAssertionCredential,
    ClientSecretCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

TENANT = "72f988bf-0000-4000-8000-000000000001"
CLIENT = "0f3c1a2b-0000-4000-8000-00000000c11e"
SECRET = "entra-sdk-test-secret~0123456789"
SCOPE = "https://cognitiveservices.azure.com/.default"
APP_CERT = pathlib.Path(__file__).resolve().parent.parent / "fakes/fixtures/throwaway-entra-certificate.pem"


def federated_token():
    part = lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()
    claims = {"iss": "https://token.actions.githubusercontent.com", "sub": "repo:tinyagent/tinyagent:ref:refs/heads/main",
              "aud": "api://AzureADTokenExchange", "exp": int(time.time()) + 600}
    return f"{part({'alg': 'RS256', 'typ': 'JWT', 'kid': 'k1'})}.{part(claims)}.c2lnbmF0dXJl"


@pytest.fixture
def tls(tmp_path, monkeypatch):
    """A server certificate for 127.0.0.1, trusted by requests."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "tls-cert.pem", tmp_path / "tls-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert_path))
    return ["--tls-cert", str(cert_path), "--tls-key", str(key_path)]


def entra(start_fake, tls, *args):
    fake = start_fake("entra", "--tenant", TENANT, "--client-id", CLIENT, *tls, *args)
    fake.authority = f"https://127.0.0.1:{fake.port}"
    return fake


def token_requests(fake):
    return [r for r in fake.requests() if r["path"] == f"/{TENANT}/oauth2/v2.0/token"]


def form(request):
    import urllib.parse

    return dict(urllib.parse.parse_qsl(request["body"]))


def test_a_client_secret_gets_a_token(start_fake, tls):
    fake = entra(start_fake, tls, "--client-secret", SECRET, "--lifetime", "1800")
    credential = ClientSecretCredential(TENANT, CLIENT, SECRET, authority=fake.authority, disable_instance_discovery=True)
    token = credential.get_token(SCOPE)
    assert token.token.startswith("eyJ")
    assert 1700 < token.expires_on - time.time() <= 1800
    (request,) = token_requests(fake)
    sent = form(request)
    assert sent["grant_type"] == "client_credentials"
    assert sent["client_secret"] == SECRET and sent["scope"] == SCOPE


def test_a_wrong_secret_is_refused_with_entras_code(start_fake, tls):
    fake = entra(start_fake, tls, "--client-secret", SECRET)
    credential = ClientSecretCredential(TENANT, CLIENT, "wrong", authority=fake.authority, disable_instance_discovery=True)
    with pytest.raises(ClientAuthenticationError) as refused:
        credential.get_token(SCOPE)
    assert "AADSTS7000215" in str(refused.value)


def test_a_certificates_signed_assertion_is_checked_and_taken(start_fake, tls):
    fake = entra(start_fake, tls, "--cert", str(APP_CERT))
    credential = CertificateCredential(TENANT, CLIENT, certificate_path=str(APP_CERT), authority=fake.authority,
                                       disable_instance_discovery=True)
    assert credential.get_token(SCOPE).token.startswith("eyJ")
    sent = form(token_requests(fake)[0])
    assert sent["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    header = json.loads(base64.urlsafe_b64decode(sent["client_assertion"].split(".")[0] + "=="))
    assert header["alg"] == "RS256" and header["x5t"]


def test_an_assertion_signed_by_another_key_is_refused(start_fake, tls, tmp_path):
    fake = entra(start_fake, tls, "--cert", str(APP_CERT))
    # The registered certificate with another key: its thumbprint, not its signature.
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    text = APP_CERT.read_text()
    forged = tmp_path / "forged.pem"
    forged.write_text(text[: text.index("-----BEGIN PRIVATE KEY")] + other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())
    credential = CertificateCredential(TENANT, CLIENT, certificate_path=str(forged), authority=fake.authority,
                                       disable_instance_discovery=True)
    with pytest.raises(ClientAuthenticationError) as refused:
        credential.get_token(SCOPE)
    assert "AADSTS700027" in str(refused.value)


def test_a_federated_token_is_the_client_assertion(start_fake, tls, tmp_path):
    token = federated_token()
    fake = entra(start_fake, tls, "--federated", token)
    credential = ClientAssertionCredential(TENANT, CLIENT, lambda: token, authority=fake.authority)
    assert credential.get_token(SCOPE).token.startswith("eyJ")
    path = tmp_path / "azure-identity-token"
    path.write_text(token)
    workload = WorkloadIdentityCredential(tenant_id=TENANT, client_id=CLIENT, token_file_path=str(path), authority=fake.authority)
    assert workload.get_token(SCOPE).token.startswith("eyJ")
    assert all(form(r)["client_assertion"] == token for r in token_requests(fake))
    unknown = ClientAssertionCredential(TENANT, CLIENT, lambda: federated_token() + "x", authority=fake.authority)
    with pytest.raises(ClientAuthenticationError):
        unknown.get_token(SCOPE)


def test_app_services_managed_identity_endpoint(start_fake, monkeypatch):
    fake = start_fake("entra", "--identity-header", "hdr-0123", "--lifetime", "86399")
    monkeypatch.setenv("IDENTITY_ENDPOINT", f"{fake.url}/msi/token")
    monkeypatch.setenv("IDENTITY_HEADER", "hdr-0123")
    token = ManagedIdentityCredential().get_token(SCOPE)
    assert token.token.startswith("eyJ")
    assert token.expires_on - time.time() > 80000
    (request,) = fake.requests()
    assert request["query"] == {"api-version": "2019-08-01", "resource": "https://cognitiveservices.azure.com"}
    assert request["headers"]["x-identity-header"] == "hdr-0123"


def test_the_instance_metadata_service(start_fake, monkeypatch):
    fake = start_fake("entra")
    monkeypatch.delenv("IDENTITY_ENDPOINT", raising=False)
    monkeypatch.delenv("IDENTITY_HEADER", raising=False)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", fake.url)
    token = ManagedIdentityCredential(client_id="user-assigned-1").get_token(SCOPE)
    assert token.token.startswith("eyJ")
    request = [r for r in fake.requests() if r["path"] == "/metadata/identity/oauth2/token"][-1]
    assert request["headers"]["metadata"] == "true"
    assert request["query"]["resource"] == "https://cognitiveservices.azure.com"
    assert request["query"]["client_id"] == "user-assigned-1"
