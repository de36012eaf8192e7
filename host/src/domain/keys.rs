//! API keys: `pk_…` (public, may only track) and `sk_…` (secret, may do everything). A key is 32
//! random bytes in base62 after its prefix. Only its SHA-256 is stored; keys are high-entropy, so
//! a fast hash is enough and lets a request find its project with one indexed lookup.

use rand::Rng;
use sha2::{Digest, Sha256};

/// The kind of an API key, read from its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// `pk_`: may call `POST /v1/track` only.
    Public,
    /// `sk_`: may call every endpoint.
    Secret,
}

impl KeyKind {
    /// The kind of a presented token, if it has a known prefix.
    pub fn of(token: &str) -> Option<KeyKind> {
        if token.starts_with("pk_") {
            Some(KeyKind::Public)
        } else if token.starts_with("sk_") {
            Some(KeyKind::Secret)
        } else {
            None
        }
    }
}

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A freshly generated pair of keys, shown to the user exactly once.
#[derive(Clone, Debug)]
pub struct KeyPair {
    /// The public key.
    pub public_key: String,
    /// The secret key.
    pub secret_key: String,
}

impl KeyPair {
    /// Generates both keys.
    pub fn generate() -> KeyPair {
        KeyPair {
            public_key: random_key("pk_"),
            secret_key: random_key("sk_"),
        }
    }
}

fn random_key(prefix: &str) -> String {
    let mut rng = rand::thread_rng();
    let body: String = (0..43)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{body}")
}

/// The stored form of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The part of a key shown in listings: its prefix and first characters.
pub fn key_hint(key: &str) -> String {
    format!("{}…", &key[..key.len().min(9)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_kinds_and_stable_hashes() {
        let pair = KeyPair::generate();
        assert_eq!(KeyKind::of(&pair.public_key), Some(KeyKind::Public));
        assert_eq!(KeyKind::of(&pair.secret_key), Some(KeyKind::Secret));
        assert_eq!(KeyKind::of("xk_abc"), None);
        assert_eq!(hash_key(&pair.secret_key), hash_key(&pair.secret_key));
        assert_ne!(hash_key(&pair.secret_key), hash_key(&pair.public_key));
        assert_eq!(pair.secret_key.len(), 46);
    }
}
