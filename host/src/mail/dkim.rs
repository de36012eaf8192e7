//! DKIM signing (RSA-SHA256, relaxed/relaxed) of a finished message with its sending domain's
//! key, through `mail-auth` on `aws-lc-rs` (AWS-LC's assembly RSA, at OpenSSL's speed; figures
//! in docs/benchmarks.md), and with the domain's Ed25519 key as well when it has one (RFC 8463
//! dual-signing: receivers that know Ed25519 check that signature, the others the RSA one).
//! Ready signers (the parsed key with the signature's template) are kept in a small per-process
//! cache: parsing a key costs more than signing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use mail_auth::common::crypto::{Ed25519Key, RsaKey, Sha256, SigningKey};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::{Canonicalization, Done};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

/// Entries kept before the cache starts over.
const CACHE_LIMIT: usize = 1024;

/// A ready signer of one key.
enum Signer {
    Rsa(mail_auth::dkim::DkimSigner<RsaKey<Sha256>, Done>),
    Ed25519(mail_auth::dkim::DkimSigner<Ed25519Key, Done>),
}

/// A domain's private key as stored.
#[derive(Clone, Copy)]
pub enum DkimKey<'a> {
    /// RSA, PKCS#1 (or PKCS#8) PEM.
    RsaPem(&'a str),
    /// Ed25519, base64 of the PKCS#8 document.
    Ed25519Pkcs8(&'a str),
}

/// Signs messages; cheap to clone.
#[derive(Clone, Default)]
pub struct DkimSigner {
    signers: Arc<Mutex<HashMap<String, Arc<Signer>>>>,
}

/// A key that cannot be used, or a message that cannot be signed.
#[derive(Debug, thiserror::Error)]
#[error("the DKIM key of {domain} cannot be used: {message}")]
pub struct DkimError {
    domain: String,
    message: String,
}

impl DkimSigner {
    /// Prepends a `DKIM-Signature` for `domain`/`selector` with `key` over `headers` (names
    /// present in the message) and the body of the formatted message `raw`. Called once per key
    /// of a domain: a signature does not cover another's header.
    pub fn sign(
        &self,
        raw: &mut Vec<u8>,
        domain: &str,
        selector: &str,
        key: DkimKey<'_>,
        headers: &[&'static str],
    ) -> Result<(), DkimError> {
        let error = |message: String| DkimError {
            domain: domain.to_string(),
            message,
        };
        let signer = self.signer(domain, selector, key, headers).map_err(error)?;
        let signature = match &*signer {
            Signer::Rsa(s) => s.sign(raw),
            Signer::Ed25519(s) => s.sign(raw),
        };
        let header = signature.map_err(|e| error(e.to_string()))?.to_header();
        raw.splice(0..0, header.into_bytes());
        Ok(())
    }

    fn signer(
        &self,
        domain: &str,
        selector: &str,
        key: DkimKey<'_>,
        headers: &[&'static str],
    ) -> Result<Arc<Signer>, String> {
        let cache_key = format!("{domain}\0{selector}\0{}", headers.join(":"));
        if let Some(signer) = self
            .signers
            .lock()
            .expect("DKIM cache lock")
            .get(&cache_key)
        {
            return Ok(signer.clone());
        }
        let signer = Arc::new(match key {
            DkimKey::RsaPem(pem) => {
                let der =
                    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string())?;
                let rsa = RsaKey::<Sha256>::from_key_der(der).map_err(|e| e.to_string())?;
                Signer::Rsa(ready(rsa, domain, selector, headers))
            }
            DkimKey::Ed25519Pkcs8(pkcs8) => {
                let der = base64::engine::general_purpose::STANDARD
                    .decode(pkcs8.trim())
                    .map_err(|e| format!("the Ed25519 key is not base64: {e}"))?;
                let ed = Ed25519Key::from_pkcs8_der(&der).map_err(|e| e.to_string())?;
                Signer::Ed25519(ready(ed, domain, selector, headers))
            }
        });
        let mut cache = self.signers.lock().expect("DKIM cache lock");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(cache_key, signer.clone());
        Ok(signer)
    }
}

/// A signer of `key` for `domain`/`selector` over `headers`, relaxed/relaxed.
fn ready<K: SigningKey>(
    key: K,
    domain: &str,
    selector: &str,
    headers: &[&'static str],
) -> mail_auth::dkim::DkimSigner<K, Done> {
    mail_auth::dkim::DkimSigner::from_key(key)
        .domain(domain)
        .selector(selector)
        .headers(headers.iter().copied())
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
}
