//! `POST /v1/verify`: checks one email address. The rules are in
//! `domain/verification.rs`, the lookups in `verify.rs`; this maps them to HTTP.

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use super::ApiTags;
use super::error::PublicApiError;
use super::extract::{JsonBody, SecretKeyAuth};
use super::formats::EmailText;
use super::state::AppState;
use crate::domain::verification::Verdict;

/// The address to verify.
#[derive(Object, Deserialize, Serialize)]
pub struct VerifyRequest {
    /// The email address. An address that is not valid is not an error: the answer says why.
    pub email: EmailText,
}

/// What was found about the address.
#[derive(Object, Deserialize, Serialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct VerifyData {
    /// The address, normalised (lower-case dot-atom local part, ASCII/punycode domain); the
    /// input as sent (trimmed) when it is not an address.
    pub email: String,
    /// The syntax is accepted, the domain exists and can receive mail (a mail server in MX, or
    /// no MX but an A/AAAA record at the domain) and it is not a disposable provider. `false`
    /// when DNS did not answer in time.
    pub valid: bool,
    /// The domain (or a domain it is below) is a disposable provider.
    pub is_disposable: bool,
    /// The domain is an alias or forwarding service (SimpleLogin, addy.io, DuckDuckGo, Firefox
    /// Relay, Sign in with Apple…).
    pub is_alias: bool,
    /// The domain looks like a misspelling of a popular one; see `suggestedEmail`.
    pub is_typo: bool,
    /// The local part carries a `+tag` (`ann+news@…`).
    pub is_plus_addressed: bool,
    /// The domain is a personal mailbox provider (Gmail, Outlook, iCloud…).
    pub is_personal_email: bool,
    /// The domain exists in DNS.
    pub domain_exists: bool,
    /// An A or AAAA record at the domain or at `www.` the domain.
    pub has_website: bool,
    /// MX records naming a mail server (a null MX, which refuses mail, is not one).
    pub has_mx_records: bool,
    /// The address with the domain corrected, when `isTypo`; otherwise `null`.
    #[oai(nullable)]
    pub suggested_email: Option<String>,
    /// Sentences explaining every problem found and every flag that is set.
    pub reasons: Vec<String>,
}

impl From<Verdict> for VerifyData {
    fn from(v: Verdict) -> VerifyData {
        VerifyData {
            email: v.email,
            valid: v.valid,
            is_disposable: v.is_disposable,
            is_alias: v.is_alias,
            is_typo: v.is_typo,
            is_plus_addressed: v.is_plus_addressed,
            is_personal_email: v.is_personal,
            domain_exists: v.domain_exists,
            has_website: v.has_website,
            has_mx_records: v.has_mx_records,
            suggested_email: v.suggested_email,
            reasons: v.reasons,
        }
    }
}

/// `{ success: true, data }`.
#[derive(Object, Deserialize, Serialize)]
pub struct VerifyResponse {
    /// Always `true`.
    pub success: bool,
    /// What was found.
    pub data: VerifyData,
}

/// Email verification.
#[derive(Default)]
pub struct VerifyApi;

#[OpenApi(tag = "ApiTags::Verification")]
impl VerifyApi {
    /// Verify an email address
    ///
    /// Checks the syntax (dot-atom or quoted local part, IDN domains), the lists (disposable,
    /// alias and personal providers), plus addressing and typos of popular domains, then the
    /// domain's DNS: existence, MX (a null MX refuses mail; without MX, an A/AAAA record at the
    /// domain receives mail), and a website. DNS facts are cached per domain. An address that
    /// is not valid still answers 200, with `valid: false` and the reasons; only a missing or
    /// non-string `email` is an error. Secret key only.
    #[oai(path = "/v1/verify", method = "post", operation_id = "verifyEmail")]
    async fn verify(
        &self,
        _auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<VerifyRequest>,
    ) -> Result<Json<VerifyResponse>, PublicApiError> {
        let verdict = state.verifier().verify(body.0.email.as_str()).await;
        Ok(Json(VerifyResponse {
            success: true,
            data: verdict.into(),
        }))
    }
}
