//! Dashboard passwords: argon2id with the crate's default (OWASP) parameters, hashed and checked
//! on the blocking pool so that a login never stalls the async workers, and at most a few at
//! once (a semaphore), so that a flood of logins cannot exhaust memory.

use argon2::Argon2;
use argon2::password_hash::{
    PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng,
};

/// Shortest accepted password.
pub const MIN_PASSWORD_LEN: usize = 8;
/// Longest accepted password (argon2 accepts more, but nobody types this much).
pub const MAX_PASSWORD_LEN: usize = 1024;

/// A password that meets the length rule.
#[derive(Clone)]
pub struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(…)")
    }
}

impl Password {
    /// Checks the length rule.
    pub fn parse(s: String) -> Result<Password, String> {
        let n = s.chars().count();
        if n < MIN_PASSWORD_LEN {
            return Err(format!(
                "the password must be at least {MIN_PASSWORD_LEN} characters"
            ));
        }
        if n > MAX_PASSWORD_LEN {
            return Err(format!(
                "the password must be at most {MAX_PASSWORD_LEN} characters"
            ));
        }
        Ok(Password(s))
    }

    /// Generates a random password for `herald init`.
    pub fn random() -> Password {
        use rand::Rng;
        const CHARS: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        let mut rng = rand::thread_rng();
        Password(
            (0..20)
                .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
                .collect(),
        )
    }

    /// The clear text (for `herald init` output only).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Argon2 runs at once in this process: each takes 19 MiB for its duration, so however many
/// logins arrive together, hashing holds at most this many times that (the rest wait their turn
/// without a thread or memory).
fn hashing_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores.clamp(2, 16))
    })
}

/// Runs `f` (one argon2 run) on the blocking pool under the hashing bound.
async fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    let _permit = hashing_permits().acquire().await?;
    Ok(tokio::task::spawn_blocking(f).await?)
}

/// Hashes a password into its PHC string.
pub async fn hash(password: Password) -> anyhow::Result<String> {
    bounded(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.0.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("argon2: {e}"))
    })
    .await?
}

/// A PHC string that never matches, checked when the user does not exist so that a login costs
/// the same either way.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$0Kj7UpAr3j9sYzQ3+7S0wF8Pq6k3p8P1cWfA4bI9JXo";

/// Checks `password` against a stored PHC string (or a dummy when there is none).
pub async fn verify(password: String, stored: Option<String>) -> bool {
    bounded(move || {
        let exists = stored.is_some();
        let phc = stored.unwrap_or_else(|| DUMMY_HASH.to_string());
        let Ok(parsed) = PasswordHash::new(&phc) else {
            return false;
        };
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        ok && exists
    })
    .await
    .unwrap_or(false)
}
