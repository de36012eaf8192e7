//! DKIM signing (RSA-SHA256, relaxed/relaxed) of a finished message with its sending domain's
//! key, through `mail-auth` on `ring` (about a tenth of the pure-Rust `rsa` crate's cost per
//! signature; figures in docs/benchmarks.md). Ready signers (the parsed key with the signature's
//! template) are kept in a small per-process cache: parsing a PEM key costs more than signing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::{Canonicalization, Done};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

/// Entries kept before the cache starts over.
const CACHE_LIMIT: usize = 1024;

type Signer = mail_auth::dkim::DkimSigner<RsaKey<Sha256>, Done>;

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
    /// Prepends a `DKIM-Signature` for `domain`/`selector` over `headers` (names present in the
    /// message) and the body of the formatted message `raw`.
    pub fn sign(
        &self,
        raw: &mut Vec<u8>,
        domain: &str,
        selector: &str,
        private_key_pem: &str,
        headers: &[&'static str],
    ) -> Result<(), DkimError> {
        let error = |message: String| DkimError {
            domain: domain.to_string(),
            message,
        };
        let signer = self
            .signer(domain, selector, private_key_pem, headers)
            .map_err(error)?;
        let header = signer
            .sign(raw)
            .map_err(|e| error(e.to_string()))?
            .to_header();
        raw.splice(0..0, header.into_bytes());
        Ok(())
    }

    fn signer(
        &self,
        domain: &str,
        selector: &str,
        private_key_pem: &str,
        headers: &[&'static str],
    ) -> Result<Arc<Signer>, String> {
        let key = format!("{domain}\0{selector}\0{}", headers.join(":"));
        if let Some(signer) = self.signers.lock().expect("DKIM cache lock").get(&key) {
            return Ok(signer.clone());
        }
        let der =
            PrivateKeyDer::from_pem_slice(private_key_pem.as_bytes()).map_err(|e| e.to_string())?;
        let rsa = RsaKey::<Sha256>::from_key_der(der).map_err(|e| e.to_string())?;
        let signer = Arc::new(
            mail_auth::dkim::DkimSigner::from_key(rsa)
                .domain(domain)
                .selector(selector)
                .headers(headers.iter().copied())
                .header_canonicalization(Canonicalization::Relaxed)
                .body_canonicalization(Canonicalization::Relaxed),
        );
        let mut cache = self.signers.lock().expect("DKIM cache lock");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, signer.clone());
        Ok(signer)
    }
}
