//! DKIM signing (RSA-SHA256, relaxed/relaxed) with each sending domain's key, through lettre.
//! Parsed keys are kept in a small per-process cache: parsing a PEM key costs more than signing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lettre::Message;
use lettre::message::dkim::{
    DkimCanonicalization, DkimCanonicalizationType, DkimConfig, DkimSigningAlgorithm,
    DkimSigningKey,
};
use lettre::message::header::HeaderName;

/// Entries kept before the cache starts over.
const CACHE_LIMIT: usize = 1024;

/// Signs messages; cheap to clone.
#[derive(Clone, Default)]
pub struct DkimSigner {
    configs: Arc<Mutex<HashMap<String, Arc<DkimConfig>>>>,
}

/// A key that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the DKIM key of {domain} cannot be read: {message}")]
pub struct DkimError {
    domain: String,
    message: String,
}

impl DkimSigner {
    /// Adds a `DKIM-Signature` for `domain`/`selector` over `headers` (names present in the
    /// message) and the body.
    pub fn sign(
        &self,
        message: &mut Message,
        domain: &str,
        selector: &str,
        private_key_pem: &str,
        headers: &[&'static str],
    ) -> Result<(), DkimError> {
        let key = format!("{domain}\0{selector}\0{}", headers.join(":"));
        let cached = self
            .configs
            .lock()
            .expect("DKIM cache lock")
            .get(&key)
            .cloned();
        let config = match cached {
            Some(c) => c,
            None => {
                let signing_key = DkimSigningKey::new(private_key_pem, DkimSigningAlgorithm::Rsa)
                    .map_err(|e| DkimError {
                    domain: domain.to_string(),
                    message: e.to_string(),
                })?;
                let config = Arc::new(DkimConfig::new(
                    selector.to_string(),
                    domain.to_string(),
                    signing_key,
                    headers
                        .iter()
                        .map(|h| HeaderName::new_from_ascii_str(h))
                        .collect(),
                    DkimCanonicalization {
                        header: DkimCanonicalizationType::Relaxed,
                        body: DkimCanonicalizationType::Relaxed,
                    },
                ));
                let mut cache = self.configs.lock().expect("DKIM cache lock");
                if cache.len() >= CACHE_LIMIT {
                    cache.clear();
                }
                cache.insert(key, config.clone());
                config
            }
        };
        message.sign(&config);
        Ok(())
    }
}
