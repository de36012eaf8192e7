//! Signed, unguessable links the service serves: subscription pages for a contact, the
//! confirmation of a pending subscription, and the tracking links and "view in browser" page of
//! an email. A token is `base64url(payload).base64url(HMAC-SHA256(key, payload)[..16])`;
//! the key is derived from the deployment's link secret (kept in the database, apart from the
//! session secret, so rotating that one never breaks a link in mail already sent), so every
//! instance accepts the links of every other and no link can be made or altered without it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What a token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkTarget {
    /// A contact's subscription pages (unsubscribe, subscribe, manage).
    Contact {
        /// The contact's id.
        contact_id: String,
    },
    /// A contact's subscription to one topic: the unsubscribe link of a topic's email, which
    /// leaves that topic only.
    Topic {
        /// The contact's id.
        contact_id: String,
        /// The topic's id.
        topic_id: String,
    },
    /// The open pixel of an email.
    Open {
        /// The email's id.
        email_id: String,
    },
    /// The confirmation of a contact's pending subscription (confirmed opt-in), for the wait
    /// that started at `since` (unix ms): a link of an earlier wait confirms nothing.
    Confirm {
        /// The contact's id.
        contact_id: String,
        /// When its wait started.
        since: i64,
    },
    /// The "view in browser" page of an email.
    View {
        /// The email's id.
        email_id: String,
    },
    /// The `index`th tracked link of an email.
    Click {
        /// The email's id.
        email_id: String,
        /// Index into the email's links.
        index: usize,
    },
}

impl LinkTarget {
    fn encode(&self) -> String {
        match self {
            LinkTarget::Contact { contact_id } => format!("c:{contact_id}"),
            LinkTarget::Topic {
                contact_id,
                topic_id,
            } => format!("t:{contact_id}:{topic_id}"),
            LinkTarget::Open { email_id } => format!("o:{email_id}"),
            LinkTarget::Click { email_id, index } => format!("k:{email_id}:{index}"),
            LinkTarget::Confirm { contact_id, since } => format!("p:{contact_id}:{since}"),
            LinkTarget::View { email_id } => format!("v:{email_id}"),
        }
    }

    fn decode(s: &str) -> Option<LinkTarget> {
        let (kind, rest) = s.split_once(':')?;
        match kind {
            "c" => Some(LinkTarget::Contact {
                contact_id: rest.to_string(),
            }),
            "t" => {
                let (contact_id, topic_id) = rest.split_once(':')?;
                Some(LinkTarget::Topic {
                    contact_id: contact_id.to_string(),
                    topic_id: topic_id.to_string(),
                })
            }
            "o" => Some(LinkTarget::Open {
                email_id: rest.to_string(),
            }),
            "k" => {
                let (email_id, index) = rest.rsplit_once(':')?;
                Some(LinkTarget::Click {
                    email_id: email_id.to_string(),
                    index: index.parse().ok()?,
                })
            }
            "p" => {
                let (contact_id, since) = rest.rsplit_once(':')?;
                Some(LinkTarget::Confirm {
                    contact_id: contact_id.to_string(),
                    since: since.parse().ok()?,
                })
            }
            "v" => Some(LinkTarget::View {
                email_id: rest.to_string(),
            }),
            _ => None,
        }
    }
}

/// A contact's subscription links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContactUrls {
    /// `…/unsubscribe/<token>`.
    pub unsubscribe: String,
    /// `…/subscribe/<token>`.
    pub subscribe: String,
    /// `…/manage/<token>`.
    pub manage: String,
}

/// Makes and checks link tokens and the URLs that carry them.
#[derive(Clone)]
pub struct LinkSigner {
    key: [u8; 32],
    base_url: String,
    /// The address the server actually listens on, when no public URL was configured.
    bound_url: std::sync::Arc<std::sync::OnceLock<String>>,
}

impl LinkSigner {
    /// A signer whose key is derived from `secret`; URLs start with `base_url`.
    pub fn new(secret: &str, base_url: &str) -> LinkSigner {
        let mut hasher = Sha256::new();
        hasher.update(b"herald link signing v1\0");
        hasher.update(secret.as_bytes());
        LinkSigner {
            key: hasher.finalize().into(),
            base_url: base_url.trim_end_matches('/').to_string(),
            bound_url: Default::default(),
        }
    }

    /// Uses `url` (the address the server bound, e.g. after listening on port 0) instead of the
    /// configured default; only the first call counts.
    pub fn use_bound_url(&self, url: &str) {
        let _ = self.bound_url.set(url.trim_end_matches('/').to_string());
    }

    /// The public base URL links start with (also the base of uploaded images' URLs).
    pub fn base(&self) -> &str {
        self.bound_url.get().unwrap_or(&self.base_url)
    }

    fn mac(&self, payload: &[u8]) -> [u8; 16] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(payload);
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }

    /// The token of `target`.
    pub fn token(&self, target: &LinkTarget) -> String {
        let payload = target.encode();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload.as_bytes()),
            URL_SAFE_NO_PAD.encode(self.mac(payload.as_bytes()))
        )
    }

    /// What a token stands for, if it is genuine.
    pub fn verify(&self, token: &str) -> Option<LinkTarget> {
        let (payload, tag) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != 16 {
            return None;
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(&payload);
        // Constant-time comparison of the truncated tag.
        mac.verify_truncated_left(&tag).ok()?;
        LinkTarget::decode(std::str::from_utf8(&payload).ok()?)
    }

    /// `…/unsubscribe/<token>` for a contact.
    pub fn unsubscribe_url(&self, contact_id: &str) -> String {
        self.contact_urls(contact_id).unsubscribe
    }

    /// `…/subscribe/<token>` for a contact.
    pub fn subscribe_url(&self, contact_id: &str) -> String {
        self.contact_urls(contact_id).subscribe
    }

    /// The three subscription links of a contact (one token, signed once).
    pub fn contact_urls(&self, contact_id: &str) -> ContactUrls {
        self.contact_urls_about(contact_id, None)
    }

    /// The subscription links of a contact in an email about `topic`, if any: then the
    /// unsubscribe link (the `List-Unsubscribe` header's and `{{unsubscribeUrl}}`) leaves that
    /// topic only; the others are the contact's own.
    pub fn contact_urls_about(&self, contact_id: &str, topic: Option<&str>) -> ContactUrls {
        let token = self.token(&LinkTarget::Contact {
            contact_id: contact_id.to_string(),
        });
        let base = self.base();
        let unsubscribe = match topic {
            Some(topic_id) => format!(
                "{base}/unsubscribe/{}",
                self.token(&LinkTarget::Topic {
                    contact_id: contact_id.to_string(),
                    topic_id: topic_id.to_string(),
                })
            ),
            None => format!("{base}/unsubscribe/{token}"),
        };
        ContactUrls {
            unsubscribe,
            subscribe: format!("{base}/subscribe/{token}"),
            manage: format!("{base}/manage/{token}"),
        }
    }

    /// The open pixel of an email.
    pub fn open_url(&self, email_id: &str) -> String {
        let token = self.token(&LinkTarget::Open {
            email_id: email_id.to_string(),
        });
        format!("{}/t/o/{token}", self.base())
    }

    /// `…/confirm/<token>`: the confirmation page of a contact's wait that started at `since`.
    pub fn confirm_url(&self, contact_id: &str, since: i64) -> String {
        let token = self.token(&LinkTarget::Confirm {
            contact_id: contact_id.to_string(),
            since,
        });
        format!("{}/confirm/{token}", self.base())
    }

    /// `…/view/<token>`: the "view in browser" page of an email.
    pub fn view_url(&self, email_id: &str) -> String {
        let token = self.token(&LinkTarget::View {
            email_id: email_id.to_string(),
        });
        format!("{}/view/{token}", self.base())
    }

    /// The redirect of an email's `index`th link.
    pub fn click_url(&self, email_id: &str, index: usize) -> String {
        let token = self.token(&LinkTarget::Click {
            email_id: email_id.to_string(),
            index,
        });
        format!("{}/t/c/{token}", self.base())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_refuse_tampering() {
        let signer = LinkSigner::new("secret", "https://h.example/");
        for target in [
            LinkTarget::Contact {
                contact_id: "cnt_1".into(),
            },
            LinkTarget::Topic {
                contact_id: "cnt_1".into(),
                topic_id: "top_1".into(),
            },
            LinkTarget::Open {
                email_id: "eml_1".into(),
            },
            LinkTarget::Click {
                email_id: "eml_1".into(),
                index: 3,
            },
            LinkTarget::Confirm {
                contact_id: "cnt_1".into(),
                since: 1_700_000_000_000,
            },
            LinkTarget::View {
                email_id: "eml_1".into(),
            },
        ] {
            let token = signer.token(&target);
            assert_eq!(signer.verify(&token), Some(target.clone()));
            // Another key, or a changed payload, is refused.
            assert_eq!(LinkSigner::new("other", "x").verify(&token), None);
            let (_, tag) = token.split_once('.').unwrap();
            let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(b"c:cnt_2"));
            assert_eq!(signer.verify(&forged), None);
        }
        assert_eq!(signer.verify("garbage"), None);
        assert_eq!(signer.verify("a.b"), None);
        assert!(
            signer
                .unsubscribe_url("cnt_1")
                .starts_with("https://h.example/unsubscribe/")
        );
    }
}
