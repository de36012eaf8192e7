//! Dashboard passwords: argon2id with the crate's default (OWASP) parameters, hashed and checked
//! on a few dedicated threads so that a login never stalls the async workers and a flood of
//! logins cannot exhaust memory (at most one 19 MiB run per thread).

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

/// One argon2 run, queued for the hashing threads.
type Job = Box<dyn FnOnce() + Send>;

/// The threads that hash passwords: as many as the cores (2 to 16), started on first use and
/// fed from one queue. Each argon2 run takes 19 MiB for its duration, so however many logins
/// arrive together, hashing holds at most this many times that; the rest wait in the queue as
/// small closures, without a thread or memory of their own. Fixed threads also keep the
/// allocator's per-thread arenas to this number (the blocking pool's many threads each kept a
/// 19 MiB arena alive).
fn hashers() -> &'static std::sync::Mutex<std::sync::mpsc::Sender<Job>> {
    static QUEUE: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(2, 16);
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("herald-hash-{i}"))
                .spawn(move || {
                    loop {
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(poisoned) => poisoned.into_inner().recv(),
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    }
                });
            if let Err(err) = spawned {
                tracing::error!(error = %err, "could not start a password hashing thread");
            }
        }
        std::sync::Mutex::new(tx)
    })
}

/// Runs `f` (one argon2 run) on the hashing threads and waits for it without blocking.
async fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(f());
    });
    hashers()
        .lock()
        .map_err(|_| anyhow::anyhow!("the password hashing queue is poisoned"))?
        .send(job)
        .map_err(|_| anyhow::anyhow!("no password hashing thread is running"))?;
    Ok(result.await?)
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
