//! The submission listener's side: `AUTH PLAIN` and `AUTH LOGIN` with the project's secret key
//! as the password (any user name), offered only over TLS unless the listener is on loopback or
//! `submission.allow_plain_auth` is set; a message takes the path of `/v1/send` through
//! `services::submission`, whose refusals are answered as they are (`550 5.7.1 the domain … is
//! not verified for this project`).

use std::net::SocketAddr;

use base64::Engine as _;

use super::reply::Reply;
use crate::api::AppState;
use crate::domain::ids::ProjectId;
use crate::services::submission::SubmissionError;

/// Which answer to an `AUTH` challenge the session waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// The `PLAIN` response (`authzid NUL authcid NUL password`, base64).
    Plain,
    /// The `LOGIN` user name (base64).
    LoginUser,
    /// The `LOGIN` password (base64).
    LoginPassword,
}

/// Whether a listener on `addr` accepts `AUTH` before TLS: on loopback, or when the setting
/// allows it.
pub fn plain_auth_allowed(addr: SocketAddr, allow_plain_auth: bool) -> bool {
    allow_plain_auth || addr.ip().is_loopback()
}

/// Whether `AUTH` may be used on a connection (encrypted when `tls`) of a listener that
/// accepts it before TLS when `plain_auth`.
pub fn auth_allowed(tls: bool, plain_auth: bool) -> bool {
    tls || plain_auth
}

/// The password of a `PLAIN` response, if it is one.
pub fn decode_plain(response: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .ok()?;
    let mut parts = bytes.split(|b| *b == 0);
    let (_authzid, _authcid, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || password.is_empty() {
        return None;
    }
    String::from_utf8(password.to_vec()).ok()
}

/// The text of a `LOGIN` answer (user name or password), if it is base64 of UTF-8.
pub fn decode_login(response: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The submission service as the sessions call it; cheap to clone.
#[derive(Clone)]
pub struct Submit {
    state: AppState,
}

/// A service refusal as a reply.
fn reply_of(error: SubmissionError) -> Reply {
    Reply::parsed(error.code, &error.enhanced, error.message)
}

impl Submit {
    /// Submits through `state`'s submission service.
    pub fn new(state: AppState) -> Submit {
        Submit { state }
    }

    /// The project whose secret key is `password`, or the refusal.
    pub async fn authenticate(&self, password: &str) -> Result<ProjectId, Reply> {
        self.state
            .submission()
            .authenticate(password)
            .await
            .map_err(reply_of)
    }

    /// Sends `raw` from `mail_from` to `rcpts` as `project`: `250` once every email is queued.
    pub async fn submit(
        &self,
        project: &ProjectId,
        mail_from: &str,
        rcpts: &[String],
        raw: Vec<u8>,
    ) -> Reply {
        match self
            .state
            .submission()
            .submit(project, mail_from, rcpts, &raw)
            .await
        {
            Ok(ids) => match ids.as_slice() {
                [one] => Reply::new(250, [2, 0, 0], format!("queued as {}", one.as_str())),
                many => Reply::new(250, [2, 0, 0], format!("queued {} emails", many.len())),
            },
            Err(error) => reply_of(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn plain_takes_the_password_whatever_the_user_name() {
        assert_eq!(
            decode_plain(&b64(b"\0anyone\0sk_secret")).as_deref(),
            Some("sk_secret")
        );
        assert_eq!(
            decode_plain(&b64(b"admin\0user\0sk_secret")).as_deref(),
            Some("sk_secret")
        );
        assert_eq!(decode_plain(&b64(b"\0user\0")), None, "an empty password");
        assert_eq!(decode_plain(&b64(b"user sk_secret")), None, "no NULs");
        assert_eq!(decode_plain("not base64!"), None);
        assert_eq!(decode_plain("="), None);
    }

    #[test]
    fn login_answers_are_base64_text() {
        assert_eq!(
            decode_login(&b64(b"sk_secret")).as_deref(),
            Some("sk_secret")
        );
        assert_eq!(decode_login("%%%"), None);
    }

    #[test]
    fn auth_before_tls_only_on_loopback_or_when_allowed() {
        let public: SocketAddr = "0.0.0.0:587".parse().unwrap();
        let v4: SocketAddr = "127.0.0.1:587".parse().unwrap();
        let v6: SocketAddr = "[::1]:587".parse().unwrap();
        assert!(!plain_auth_allowed(public, false));
        assert!(plain_auth_allowed(public, true));
        assert!(plain_auth_allowed(v4, false));
        assert!(plain_auth_allowed(v6, false));
        assert!(!auth_allowed(false, plain_auth_allowed(public, false)));
        assert!(auth_allowed(true, plain_auth_allowed(public, false)));
        assert!(auth_allowed(false, plain_auth_allowed(public, true)));
    }
}
