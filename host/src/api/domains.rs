//! `/domains`: sending domains, their DKIM key and DNS records, and verification.

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::ApiTags;
use super::error::ApiError;
use super::extract::{JsonBody, SecretKeyAuth};
use super::state::AppState;
use super::timestamp::Timestamp;
use crate::domain::ids::{DomainId, ProjectId};
use crate::domain::sending_domain::{
    DkimKey, DnsRecordState, DomainName, DomainNameError, Ed25519DkimKey, RecordStatus,
};
use crate::store::domains::{Domain, DomainChange, NewDomain};

/// `POST /domains` body.
#[derive(Object, serde::Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct CreateDomain {
    /// The domain to send from, e.g. `mail.example.com` (Unicode names are accepted).
    pub domain: String,
    /// Whether addresses on subdomains of this domain may send once it is verified
    /// (default false).
    #[oai(nullable)]
    pub allow_subdomains: Option<bool>,
    /// Whether mail is signed with an Ed25519 key as well as the RSA key (RFC 8463
    /// dual-signing; default false). The key's TXT record is added to `records` as recommended:
    /// mail is signed with it once the record is found.
    #[oai(nullable)]
    pub dkim_ed25519: Option<bool>,
    /// Whether the domain receives mail (default false): `records` then lists an MX record at
    /// the domain to the Herald host, and mail to the domain's addresses becomes
    /// `email.received` events once the domain is verified and that record is found.
    #[oai(nullable)]
    pub inbound: Option<bool>,
}

/// `PATCH /domains/:id` body; a field that is absent or null is left as it is.
#[derive(Object, serde::Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub struct UpdateDomain {
    /// Whether addresses on subdomains of this domain may send.
    #[oai(nullable)]
    pub allow_subdomains: Option<bool>,
    /// Whether mail is signed with an Ed25519 key as well (RFC 8463). `true` on a domain without
    /// one generates the key and adds its record, pending, to `records`; `true` again keeps the
    /// key; `false` stops signing with it, forgets it and removes its record.
    #[oai(nullable)]
    pub dkim_ed25519: Option<bool>,
    /// Whether the domain receives mail. `true` adds its inbound MX record, pending, to
    /// `records` (mail is received once a check finds it); `false` stops receiving and removes
    /// the record.
    #[oai(nullable)]
    pub inbound: Option<bool>,
    /// The transport mail from this domain goes through (a named transport of the settings or
    /// a transport plugin, see docs/transports.md), before its project's; `null` goes back to
    /// the project's.
    #[oai(nullable)]
    #[serde(default)]
    pub transport: MaybeUndefined<String>,
}

/// Checks a `transport` of a change: `Null` clears it; a name must be a configured transport
/// (422 naming `transport` otherwise). `None` when the field was left out.
pub(super) fn transport_change(
    state: &AppState,
    transport: &MaybeUndefined<String>,
) -> Result<Option<Option<String>>, ApiError> {
    match transport {
        MaybeUndefined::Undefined => Ok(None),
        MaybeUndefined::Null => Ok(Some(None)),
        MaybeUndefined::Value(name) => {
            let name = name.trim().to_ascii_lowercase();
            state.plugins().transport_usable(&name).map_err(|message| {
                ApiError::invalid_field("transport", "unknown_transport", message)
            })?;
            Ok(Some(Some(name)))
        }
    }
}

/// A DNS record to publish and its state.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct DnsRecordBody {
    /// `TXT` or `MX`.
    #[oai(rename = "type")]
    pub record_type: String,
    /// The full name to publish it at.
    pub name: String,
    /// The value to publish (an MX value is `preference host`).
    pub value: String,
    /// `pending` (not found yet), `verified` or `failed` (found with another value).
    pub status: String,
    /// Whether verification needs it; DMARC, the Ed25519 key and the inbound MX record are not
    /// needed to send.
    pub required: bool,
    /// What DNS answered at the name in the last check.
    pub found: Vec<String>,
}

impl From<DnsRecordState> for DnsRecordBody {
    fn from(r: DnsRecordState) -> DnsRecordBody {
        DnsRecordBody {
            record_type: r.record_type,
            name: r.name,
            value: r.value,
            status: match r.status {
                RecordStatus::Pending => "pending",
                RecordStatus::Verified => "verified",
                RecordStatus::Failed => "failed",
            }
            .into(),
            required: r.required,
            found: r.found,
        }
    }
}

/// A sending domain.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct DomainBody {
    /// Its id (`dom_…`).
    pub id: String,
    /// The domain name (IDNs in their ASCII form).
    pub domain: String,
    /// `pending`, `verified` or `failed`.
    pub status: String,
    /// The records to publish, each with its own status.
    pub records: Vec<DnsRecordBody>,
    /// Why the domain is not verified, when it is not.
    #[oai(nullable)]
    pub failure_reason: Option<String>,
    /// Whether subdomains may send under it.
    pub allow_subdomains: bool,
    /// The DKIM selector of its key.
    pub dkim_selector: String,
    /// Whether mail is signed with an Ed25519 key as well, once its record is found.
    pub dkim_ed25519: bool,
    /// The selector of the Ed25519 key; null when the domain has none.
    #[oai(nullable)]
    pub dkim_ed25519_selector: Option<String>,
    /// Whether it receives mail (its inbound MX record is in `records`).
    pub inbound: bool,
    /// Whether mail to its addresses is received now: `inbound`, the domain verified and its
    /// inbound MX record found.
    pub receiving: bool,
    /// The transport mail from it goes through; null: its project's.
    #[oai(nullable)]
    pub transport: Option<String>,
    /// When it was added.
    pub created_at: Timestamp,
    /// When it was first verified.
    #[oai(nullable)]
    pub verified_at: Option<Timestamp>,
    /// When its records were last checked.
    #[oai(nullable)]
    pub last_checked_at: Option<Timestamp>,
}

impl From<Domain> for DomainBody {
    fn from(d: Domain) -> DomainBody {
        let receiving = d.receiving();
        DomainBody {
            id: d.id.into_string(),
            domain: d.name.as_str().to_string(),
            status: d.status.as_str().into(),
            records: d.records.into_iter().map(Into::into).collect(),
            failure_reason: d.failure_reason,
            allow_subdomains: d.allow_subdomains,
            dkim_selector: d.dkim_selector,
            dkim_ed25519: d.dkim_ed25519.is_some(),
            dkim_ed25519_selector: d.dkim_ed25519.map(|k| k.selector),
            inbound: d.inbound,
            receiving,
            transport: d.transport,
            created_at: Timestamp(d.created_at),
            verified_at: d.verified_at.map(Timestamp),
            last_checked_at: d.last_checked_at.map(Timestamp),
        }
    }
}

/// Answer of `POST /domains`.
#[derive(ApiResponse)]
pub enum CreatedDomain {
    /// Added; publish `records`, then verify.
    #[oai(status = 201)]
    Created(Json<DomainBody>),
}

/// Answer of `DELETE /domains/:id`.
#[derive(ApiResponse)]
pub enum DeletedDomain {
    /// Removed.
    #[oai(status = 204)]
    Deleted,
}

fn domain_id(id: &str) -> Result<DomainId, ApiError> {
    DomainId::parse(id).ok_or_else(|| ApiError::not_found("domain"))
}

/// The domains endpoints.
#[derive(Default)]
pub struct DomainsApi;

#[OpenApi(tag = "ApiTags::Domains")]
impl DomainsApi {
    /// Add a sending domain
    ///
    /// Generates an RSA-2048 DKIM key for the domain (the private key never leaves the service)
    /// and answers the DNS records to publish: DKIM TXT, SPF TXT and the return-path MX
    /// (required) and DMARC TXT (recommended). With `dkimEd25519`, an Ed25519 key as well and its
    /// DKIM TXT record (recommended: mail is signed with both keys once it is found). With
    /// `inbound`, the MX record at the domain that makes it receive mail. The domain
    /// is checked in the background every 5 minutes until it is verified, or at once with
    /// `GET /domains/:id/verify`.
    #[oai(path = "/domains", method = "post", operation_id = "createDomain")]
    async fn create(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        body: JsonBody<CreateDomain>,
    ) -> Result<CreatedDomain, ApiError> {
        let project = auth.0.project_id();
        let name = DomainName::parse(&body.0.domain).map_err(|e| {
            let code = match e {
                DomainNameError::Syntax(_) => "invalid",
                DomainNameError::Reserved(_) => "reserved",
            };
            ApiError::invalid_field("domain", code, e.to_string())
        })?;
        let key = tokio::task::spawn_blocking(DkimKey::generate)
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?;
        let ed25519 = match body.0.dkim_ed25519 {
            Some(true) => Some(Ed25519DkimKey::generate().map_err(ApiError::internal)?),
            _ => None,
        };
        let inbound = body.0.inbound.unwrap_or(false);
        let records = state
            .sending_domains()
            .records_to_publish(
                &name,
                &key.selector,
                &key.public_base64,
                ed25519.as_ref(),
                inbound,
            )
            .await?;
        let new = NewDomain {
            name,
            allow_subdomains: body.0.allow_subdomains.unwrap_or(false),
            dkim_selector: key.selector,
            dkim_private_key: key.private_pem,
            dkim_public_key: key.public_base64,
            dkim_ed25519: ed25519,
            inbound,
            records,
        };
        // The first background check runs soon after the domain is added; later ones follow the
        // check intervals.
        let check = state
            .sending_domains()
            .first_check(state.jobs().config().max_attempts);
        let domain = state
            .store()
            .insert_domain(project, &new, &check)
            .await
            .map_err(|e| match e {
                crate::store::StoreError::Conflict(crate::store::Conflict::Domain) => {
                    ApiError::conflict(format!("the project already has the domain {}", new.name))
                        .suggest("list the project's domains with GET /domains/project/:projectId")
                }
                other => other.into(),
            })?;
        state.jobs().wake();
        Ok(CreatedDomain::Created(Json(domain.into())))
    }

    /// Domains of a project
    ///
    /// Every domain of the key's project, verified and pending. Only the key's own project id
    /// is answered; any other id is 404.
    #[oai(
        path = "/domains/project/:projectId",
        method = "get",
        operation_id = "projectDomains"
    )]
    async fn of_project(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id (`prj_…`); must be the key's own.
        #[oai(name = "projectId")]
        project_id: Path<String>,
    ) -> Result<Json<Vec<DomainBody>>, ApiError> {
        let own = auth.0.project_id();
        if ProjectId::parse(&project_id).as_ref() != Some(own) {
            return Err(ApiError::not_found("project"));
        }
        let domains = state.store().domains(own).await?;
        Ok(Json(domains.into_iter().map(Into::into).collect()))
    }

    /// Get a domain
    #[oai(path = "/domains/:id", method = "get", operation_id = "getDomain")]
    async fn get(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The domain's id.
        id: Path<String>,
    ) -> Result<Json<DomainBody>, ApiError> {
        let id = domain_id(&id)?;
        let domain = state
            .store()
            .domain(auth.0.project_id(), &id)
            .await
            .map_err(|e| ApiError::from_store(e, "domain"))?;
        Ok(Json(domain.into()))
    }

    /// Verify a domain now
    ///
    /// Looks the domain's records up at once and answers the updated domain. A domain that was
    /// verified and whose required records are gone becomes `failed` with the reason.
    #[oai(
        path = "/domains/:id/verify",
        method = "get",
        operation_id = "verifyDomain"
    )]
    async fn verify(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The domain's id.
        id: Path<String>,
    ) -> Result<Json<DomainBody>, ApiError> {
        let project = auth.0.project_id();
        let id = domain_id(&id)?;
        let domain = state
            .store()
            .domain(project, &id)
            .await
            .map_err(|e| ApiError::from_store(e, "domain"))?;
        let checked = state.sending_domains().check(&domain).await?;
        let domain = state
            .store()
            .save_domain_check(project, &id, &checked)
            .await
            .map_err(|e| ApiError::from_store(e, "domain"))?;
        // Whether it receives mail may have changed: the SMTP server reads it again.
        state.inbound_routes().forget(domain.name.as_str());
        Ok(Json(domain.into()))
    }

    /// Update a domain
    ///
    /// Sets whether addresses on subdomains may send under this domain, whether its mail is
    /// signed with an Ed25519 key as well (RFC 8463), whether it receives mail (`inbound`), and
    /// the transport its mail goes through (`transport`, 422 when no such transport is
    /// configured; `null` goes back to the project's). Fields left out are unchanged.
    #[oai(path = "/domains/:id", method = "patch", operation_id = "updateDomain")]
    async fn update(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The domain's id.
        id: Path<String>,
        body: JsonBody<UpdateDomain>,
    ) -> Result<Json<DomainBody>, ApiError> {
        let id = domain_id(&id)?;
        let change = DomainChange {
            allow_subdomains: body.0.allow_subdomains,
            dkim_ed25519: match body.0.dkim_ed25519 {
                // A key is generated whether or not the domain has one already (cheap, tens of
                // microseconds); the store keeps an existing key.
                Some(true) => Some(Some(
                    Ed25519DkimKey::generate().map_err(ApiError::internal)?,
                )),
                Some(false) => Some(None),
                None => None,
            },
            inbound: body
                .0
                .inbound
                .map(|on| on.then(|| state.sending_domains().mail_host().to_string())),
            transport: transport_change(&state, &body.0.transport)?,
        };
        let domain = state
            .store()
            .update_domain(auth.0.project_id(), &id, &change)
            .await
            .map_err(|e| ApiError::from_store(e, "domain"))?;
        state.inbound_routes().forget(domain.name.as_str());
        Ok(Json(domain.into()))
    }

    /// Remove a domain
    ///
    /// Mail can no longer be sent from it; its key is deleted.
    #[oai(
        path = "/domains/:id",
        method = "delete",
        operation_id = "deleteDomain"
    )]
    async fn delete(
        &self,
        auth: SecretKeyAuth,
        state: poem::web::Data<&AppState>,
        /// The domain's id.
        id: Path<String>,
    ) -> Result<DeletedDomain, ApiError> {
        let id = domain_id(&id)?;
        let name = state
            .store()
            .delete_domain(auth.0.project_id(), &id)
            .await
            .map_err(|e| ApiError::from_store(e, "domain"))?;
        state.inbound_routes().forget(&name);
        Ok(DeletedDomain::Deleted)
    }
}
