//! A service principal's certificate (`AZURE_CLIENT_CERTIFICATE_PATH`): a
//! PEM file holding the certificate and its RSA private key, read once;
//! each token request carries a client assertion (a JWT signed RS256 with
//! the key, its header naming the certificate by its SHA-1 thumbprint in
//! `x5t`), as MSAL builds it for azure-identity's `CertificateCredential`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use sha1::{Digest, Sha1};

/// How long an assertion is good for (MSAL's ten minutes).
const ASSERTION_LIFETIME: u64 = 600;

/// The key and the certificate's thumbprint (the key is never printed).
pub(super) struct Signer {
    key: EncodingKey,
    /// base64url of the SHA-1 of the certificate's DER.
    thumbprint: String,
}

impl Signer {
    /// Reads the PEM file at `path`; why it cannot be used, never its contents.
    pub(super) fn read(path: &Path) -> Result<Signer, &'static str> {
        let text = std::fs::read(path).map_err(|_| "cannot be read")?;
        let blocks = pem::parse_many(&text)
            .map_err(|_| "not a PEM file holding a certificate and its private key")?;
        let certificate = blocks
            .iter()
            .find(|b| b.tag() == "CERTIFICATE")
            .ok_or("a PEM file without a CERTIFICATE")?;
        if blocks.iter().any(|b| b.tag() == "ENCRYPTED PRIVATE KEY") {
            return Err(
                "its private key is encrypted (AZURE_CLIENT_CERTIFICATE_PASSWORD is not supported)",
            );
        }
        let key = blocks
            .iter()
            .find(|b| matches!(b.tag(), "PRIVATE KEY" | "RSA PRIVATE KEY"))
            .ok_or("a PEM file without its private key")?;
        let key = EncodingKey::from_rsa_pem(pem::encode(key).as_bytes())
            .map_err(|_| "its private key is not an RSA key")?;
        let thumbprint = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha1::digest(certificate.contents()));
        let signer = Signer { key, thumbprint };
        // Sign once now, so that a key ring cannot use is found at validation.
        signer
            .assertion("check", "https://check")
            .map_err(|()| "its private key is not an RSA key")?;
        Ok(signer)
    }

    /// A client assertion for `client_id` at the token endpoint `audience`.
    pub(super) fn assertion(&self, client_id: &str, audience: &str) -> Result<String, ()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let claims = serde_json::json!({
            "aud": audience,
            "iss": client_id,
            "sub": client_id,
            "jti": uuid::Uuid::new_v4().to_string(),
            "nbf": now,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
        });
        let mut header = Header::new(Algorithm::RS256);
        header.x5t = Some(self.thumbprint.clone());
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::Signer;

    /// A throwaway certificate and key made for the tests alone.
    const PEM: &str =
        include_str!("../../../../tests/fakes/fixtures/throwaway-entra-certificate.pem");

    #[test]
    fn the_assertion_names_the_certificate_and_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, PEM).unwrap();
        let signer = Signer::read(&path).unwrap();
        let jwt = signer
            .assertion("client-1", "http://127.0.0.1:9/t/oauth2/v2.0/token")
            .unwrap();
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, jsonwebtoken::Algorithm::RS256);
        // `openssl x509 -fingerprint -sha1` of the fixture, base64url.
        assert_eq!(header.x5t.as_deref(), Some(signer.thumbprint.as_str()));
        assert_eq!(signer.thumbprint.len(), 27);
        let claims = jwt.split('.').nth(1).unwrap();
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["iss"], "client-1");
        assert_eq!(claims["sub"], "client-1");
        assert_eq!(claims["aud"], "http://127.0.0.1:9/t/oauth2/v2.0/token");
        assert!(claims["exp"].as_u64().unwrap() > claims["nbf"].as_u64().unwrap());
    }

    #[test]
    fn a_file_without_both_parts_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        let cert_only: String = PEM
            .split_inclusive('\n')
            .take_while(|l| !l.contains("PRIVATE KEY"))
            .collect();
        std::fs::write(&path, cert_only).unwrap();
        assert_eq!(
            Signer::read(&path).err(),
            Some("a PEM file without its private key")
        );
        std::fs::write(&path, "not pem").unwrap();
        assert!(Signer::read(&path).is_err());
        assert_eq!(
            Signer::read(&dir.path().join("none.pem")).err(),
            Some("cannot be read")
        );
    }
}
