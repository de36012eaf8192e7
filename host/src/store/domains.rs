//! Sending domains. A domain is written together with its first background check job, and every
//! background check writes the domain's new state, completes its job and schedules the next check
//! in one transaction guarded by the job's lease: a crash never loses the chain of checks and
//! never forks it.

use sqlx::FromRow;
use sqlx::types::Json;

use super::dialect::BeginWrite;
use super::jobs::{DomainCheckPayload, JobPayload, Lease, NewJob, delete_queued_jobs_for_sql};
use super::statements::Statements;
use super::{Conflict, Store, StoreError, StoreResult};
use super::{on_db, on_db_write};
use crate::domain::ids::{DomainId, ProjectId};
use crate::domain::sending_domain::{
    DnsRecordState, DomainName, DomainStatus, Ed25519DkimKey, RecordStatus, VerifiedDomain,
    apply_check, dkim_record_name, ed25519_record, inbound_record, is_inbound_record,
    receives_mail,
};
use crate::domain::time::now_ms;

/// Stores a check's result inside the open write transaction `$tx` (binds: the SQL of
/// [`read_records_sql`], project, id, the [`CheckedDomain`], now); answers the rows changed (0:
/// the domain is gone). The records are the domain's as they are now with the states the check
/// found ([`apply_check`]): a check reads the domain before it asks DNS, and a `PATCH` that
/// added or removed a record meanwhile must not be undone.
macro_rules! save_check {
    ($tx:ident, $read:expr, $project:expr, $id:expr, $check:expr, $now:expr) => {{
        let row: Option<(Json<Vec<DnsRecordState>>,)> = sqlx::query_as(&$read)
            .bind($project)
            .bind($id)
            .fetch_optional(&mut *$tx)
            .await?;
        match row {
            None => 0,
            Some((Json(current),)) => sqlx::query(SAVE_CHECK)
                .bind($id)
                .bind($check.status.as_str())
                .bind(Json(apply_check(&current, &$check.records)))
                .bind($check.failure_reason.as_deref())
                .bind($now)
                .bind($project)
                .execute(&mut *$tx)
                .await?
                .rows_affected(),
        }
    }};
}

/// The job kind of background domain checks (run by `jobs::domains`).
pub const CHECK_KIND: &str = "domains.check";

/// A stored sending domain (without its private key).
#[derive(Clone, Debug)]
pub struct Domain {
    pub id: DomainId,
    pub project_id: ProjectId,
    pub name: DomainName,
    pub status: DomainStatus,
    /// Whether subdomains may send under it.
    pub allow_subdomains: bool,
    /// The DKIM selector.
    pub dkim_selector: String,
    /// The DKIM public key (`p=`).
    pub dkim_public_key: String,
    /// The Ed25519 key mail is signed with besides the RSA key, when the domain has one.
    pub dkim_ed25519: Option<Ed25519Public>,
    /// Whether it receives mail (its inbound MX record is listed in `records`).
    pub inbound: bool,
    /// The transport mail from it goes through; `None`: its project's.
    pub transport: Option<String>,
    /// The records to publish with their last known state.
    pub records: Vec<DnsRecordState>,
    /// Why it is not verified.
    pub failure_reason: Option<String>,
    /// Created, unix ms.
    pub created_at: i64,
    /// First verified, unix ms.
    pub verified_at: Option<i64>,
    /// Last checked, unix ms.
    pub last_checked_at: Option<i64>,
}

/// The public half of a domain's Ed25519 DKIM key.
#[derive(Clone, Debug)]
pub struct Ed25519Public {
    /// Its selector.
    pub selector: String,
    /// The public key (`p=`, base64 of the raw 32 bytes).
    pub public_key: String,
}

impl Domain {
    /// The record of the domain's Ed25519 key as it should be published, not looked up.
    pub fn ed25519_record(&self) -> Option<DnsRecordState> {
        self.dkim_ed25519
            .as_ref()
            .map(|k| ed25519_record(self.name.as_str(), &k.selector, &k.public_key))
    }

    /// Whether mail to its addresses is received now: it receives (`inbound`), it is verified
    /// (its DKIM record proves the project holds it) and its inbound MX record was found.
    pub fn receiving(&self) -> bool {
        self.inbound
            && self.status == DomainStatus::Verified
            && receives_mail(&self.records, self.name.as_str())
    }
}

#[derive(FromRow)]
struct DomainRow {
    id: String,
    project_id: String,
    name: String,
    status: String,
    allow_subdomains: bool,
    dkim_selector: String,
    dkim_public_key: String,
    dkim_ed25519_selector: Option<String>,
    dkim_ed25519_public_key: Option<String>,
    inbound: bool,
    transport: Option<String>,
    records: Json<Vec<DnsRecordState>>,
    failure_reason: Option<String>,
    created_at: i64,
    verified_at: Option<i64>,
    last_checked_at: Option<i64>,
}

const COLUMNS: &str = "id, project_id, name, status, allow_subdomains, dkim_selector, dkim_public_key, \
     dkim_ed25519_selector, dkim_ed25519_public_key, inbound, transport, records, failure_reason, created_at, \
     verified_at, last_checked_at";

impl TryFrom<DomainRow> for Domain {
    type Error = StoreError;

    fn try_from(r: DomainRow) -> Result<Domain, StoreError> {
        Ok(Domain {
            id: DomainId::from_trusted(r.id),
            project_id: ProjectId::from_trusted(r.project_id),
            name: DomainName::from_trusted(r.name),
            status: DomainStatus::parse(&r.status)
                .ok_or_else(|| StoreError::Corrupt(format!("domain status `{}`", r.status)))?,
            allow_subdomains: r.allow_subdomains,
            dkim_selector: r.dkim_selector,
            dkim_public_key: r.dkim_public_key,
            dkim_ed25519: match (r.dkim_ed25519_selector, r.dkim_ed25519_public_key) {
                (Some(selector), Some(public_key)) => Some(Ed25519Public {
                    selector,
                    public_key,
                }),
                _ => None,
            },
            inbound: r.inbound,
            transport: r.transport,
            records: r.records.0,
            failure_reason: r.failure_reason,
            created_at: r.created_at,
            verified_at: r.verified_at,
            last_checked_at: r.last_checked_at,
        })
    }
}

/// A domain to add.
pub struct NewDomain {
    pub name: DomainName,
    /// Whether subdomains may send under it.
    pub allow_subdomains: bool,
    /// DKIM selector.
    pub dkim_selector: String,
    /// DKIM private key, PKCS#1 PEM.
    pub dkim_private_key: String,
    /// DKIM public key, base64 SPKI.
    pub dkim_public_key: String,
    /// The Ed25519 key to sign with as well, when asked for.
    pub dkim_ed25519: Option<Ed25519DkimKey>,
    /// Whether it receives mail (`records` then lists its inbound MX record).
    pub inbound: bool,
    /// The records to publish, all pending.
    pub records: Vec<DnsRecordState>,
}

/// The result of a check, to store.
pub struct CheckedDomain {
    /// The new status.
    pub status: DomainStatus,
    /// The records with their states.
    pub records: Vec<DnsRecordState>,
    /// Why it is not verified.
    pub failure_reason: Option<String>,
}

/// The reads of a project's verified domains in flight: by project and the names asked.
pub(crate) type DomainLookups =
    super::rounds::Rounds<(String, Vec<String>), Vec<(VerifiedDomain, SigningDomain)>>;

/// The signing identity of a verified domain.
#[derive(Clone, Debug)]
pub struct SigningDomain {
    /// The domain name (DKIM `d=`).
    pub name: String,
    /// DKIM selector (`s=`).
    pub selector: String,
    /// The private key, PKCS#1 PEM.
    pub private_key: String,
    /// The Ed25519 key that signs as well: set when the domain has one and its record was found.
    pub ed25519: Option<Ed25519Signing>,
}

/// The Ed25519 signing key of a domain.
#[derive(Clone, Debug)]
pub struct Ed25519Signing {
    /// Its selector (`s=`).
    pub selector: String,
    /// The private key, base64 of its PKCS#8 document.
    pub private_key: String,
}

/// The change of `PATCH /domains/:id`: each part is left as it is when `None`.
pub struct DomainChange {
    /// Whether subdomains may send under the domain.
    pub allow_subdomains: Option<bool>,
    /// `Some(Some(key))` signs with Ed25519 as well (the key is used only when the domain has
    /// none yet: enabling twice keeps the first key); `Some(None)` stops and forgets the key.
    pub dkim_ed25519: Option<Option<Ed25519DkimKey>>,
    /// `Some(Some(mail_host))` receives mail, listing the inbound MX record to `mail_host`
    /// (pending until a check finds it; kept as it is when the domain receives already);
    /// `Some(None)` stops receiving and removes the record.
    pub inbound: Option<Option<String>>,
    /// `Some(Some(name))` sends its mail through the transport `name`; `Some(None)` through
    /// its project's.
    pub transport: Option<Option<String>>,
}

/// The check job `job` (whose payload is left to this function) of domain `id`.
fn check_job(id: &DomainId, project: &ProjectId, job: &NewJob) -> StoreResult<NewJob> {
    Ok(NewJob {
        project_id: Some(project.clone()),
        payload: DomainCheckPayload {
            domain_id: id.clone(),
        }
        .to_json()?,
        ..job.clone()
    })
}

impl Store {
    /// Adds a domain and schedules its first background check (`check` describes the job);
    /// `Conflict` when the project already has it.
    #[tracing::instrument(level = "debug", skip(self, domain, check))]
    pub async fn insert_domain(
        &self,
        project: &ProjectId,
        domain: &NewDomain,
        check: &NewJob,
    ) -> StoreResult<Domain> {
        let id = DomainId::generate();
        let now = now_ms();
        let check = check_job(&id, project, check)?;
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query(
                "INSERT INTO domains (id, project_id, name, status, allow_subdomains, dkim_selector, \
                 dkim_private_key, dkim_public_key, records, created_at, updated_at, \
                 dkim_ed25519_selector, dkim_ed25519_private_key, dkim_ed25519_public_key, inbound) \
                 VALUES ($1, $2, $3, 'pending', $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13)",
            )
            .bind(id.as_str())
            .bind(project.as_str())
            .bind(domain.name.as_str())
            .bind(domain.allow_subdomains)
            .bind(&domain.dkim_selector)
            .bind(&domain.dkim_private_key)
            .bind(&domain.dkim_public_key)
            .bind(Json(&domain.records))
            .bind(now)
            .bind(domain.dkim_ed25519.as_ref().map(|k| &k.selector))
            .bind(domain.dkim_ed25519.as_ref().map(|k| &k.private_pkcs8))
            .bind(domain.dkim_ed25519.as_ref().map(|k| &k.public_base64))
            .bind(domain.inbound)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::unique(e, Conflict::Domain))?;
            tx.insert_job(&check, now).await?;
            tx.commit().await?;
        });
        self.domain(project, &id).await
    }

    /// A domain of a project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn domain(&self, project: &ProjectId, id: &DomainId) -> StoreResult<Domain> {
        let sql = format!("SELECT {COLUMNS} FROM domains WHERE project_id = $1 AND id = $2");
        let row: Option<DomainRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    /// A domain by id alone (for the background checks).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn domain_by_id(&self, id: &DomainId) -> StoreResult<Option<Domain>> {
        let sql = format!("SELECT {COLUMNS} FROM domains WHERE id = $1");
        let row: Option<DomainRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(id.as_str()).fetch_optional(pool).await?
        });
        row.map(Domain::try_from).transpose()
    }

    /// The domains named `name` that receive mail now ([`Domain::receiving`]), of projects not
    /// being deleted, first verified first: the SMTP server's routing of a `RCPT` address.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn receiving_domains(&self, name: &str) -> StoreResult<Vec<Domain>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM domains WHERE name = $1 AND inbound AND status = 'verified' \
             AND EXISTS (SELECT 1 FROM projects p WHERE p.id = domains.project_id \
             AND p.deleted_at IS NULL) ORDER BY verified_at, id"
        );
        let rows: Vec<DomainRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(name).fetch_all(pool).await?
        });
        let domains = rows
            .into_iter()
            .map(Domain::try_from)
            .collect::<StoreResult<Vec<Domain>>>()?;
        Ok(domains.into_iter().filter(Domain::receiving).collect())
    }

    /// Every domain of a project, oldest first.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn domains(&self, project: &ProjectId) -> StoreResult<Vec<Domain>> {
        let sql = format!("SELECT {COLUMNS} FROM domains WHERE project_id = $1 ORDER BY id");
        let rows: Vec<DomainRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql).bind(project.as_str()).fetch_all(pool).await?
        });
        rows.into_iter().map(Domain::try_from).collect()
    }

    /// Changes a domain's options (`PATCH /domains/:id`) in one transaction. Starting Ed25519
    /// signing adds its key's record to the domain's records, pending until a check finds it;
    /// stopping removes the record and the key.
    #[tracing::instrument(level = "debug", skip(self, change))]
    pub async fn update_domain(
        &self,
        project: &ProjectId,
        id: &DomainId,
        change: &DomainChange,
    ) -> StoreResult<Domain> {
        let read = format!(
            "SELECT {COLUMNS} FROM domains WHERE project_id = $1 AND id = $2{}",
            super::dialect::for_update(self.db().backend())
        );
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let row: Option<DomainRow> = sqlx::query_as(&read)
                .bind(project.as_str())
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            let current = Domain::try_from(row.ok_or(StoreError::NotFound)?)?;
            let now = now_ms();
            if let Some(transport) = &change.transport {
                sqlx::query(
                    "UPDATE domains SET transport = $3, updated_at = $4 \
                     WHERE project_id = $1 AND id = $2",
                )
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(transport.as_deref())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            if let Some(allow) = change.allow_subdomains {
                sqlx::query(
                    "UPDATE domains SET allow_subdomains = $3, updated_at = $4 \
                     WHERE project_id = $1 AND id = $2",
                )
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(allow)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            let key = match &change.dkim_ed25519 {
                // Enabled already: the published key stays.
                Some(Some(_)) if current.dkim_ed25519.is_some() => None,
                Some(Some(key)) => Some(Some(key)),
                Some(None) if current.dkim_ed25519.is_some() => Some(None),
                _ => None,
            };
            if let Some(key) = key {
                let mut records = current.records.clone();
                if let Some(old) = current.ed25519_record() {
                    records.retain(|r| r.name != old.name);
                }
                if let Some(key) = key {
                    records.push(ed25519_record(
                        current.name.as_str(),
                        &key.selector,
                        &key.public_base64,
                    ));
                }
                sqlx::query(
                    "UPDATE domains SET dkim_ed25519_selector = $3, dkim_ed25519_private_key = $4, \
                     dkim_ed25519_public_key = $5, records = $6, updated_at = $7 \
                     WHERE project_id = $1 AND id = $2",
                )
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(key.map(|k| &k.selector))
                .bind(key.map(|k| &k.private_pkcs8))
                .bind(key.map(|k| &k.public_base64))
                .bind(Json(&records))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            let inbound = match &change.inbound {
                Some(Some(host)) if !current.inbound => Some(Some(host)),
                Some(None) if current.inbound => Some(None),
                _ => None,
            };
            if let Some(host) = inbound {
                // Read again: the Ed25519 change above may have changed the records.
                let row: Option<(Json<Vec<DnsRecordState>>,)> =
                    sqlx::query_as("SELECT records FROM domains WHERE project_id = $1 AND id = $2")
                        .bind(project.as_str())
                        .bind(id.as_str())
                        .fetch_optional(&mut *tx)
                        .await?;
                let mut records = row.ok_or(StoreError::NotFound)?.0.0;
                let name = current.name.as_str();
                records.retain(|r| !is_inbound_record(r, name));
                if let Some(host) = host {
                    records.push(inbound_record(name, host));
                }
                sqlx::query(
                    "UPDATE domains SET inbound = $3, records = $4, updated_at = $5 \
                     WHERE project_id = $1 AND id = $2",
                )
                .bind(project.as_str())
                .bind(id.as_str())
                .bind(host.is_some())
                .bind(Json(&records))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        self.domain(project, id).await
    }

    /// Removes a domain and its queued background check (a check running right now finds the
    /// domain gone and schedules no other); answers the name it had.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete_domain(&self, project: &ProjectId, id: &DomainId) -> StoreResult<String> {
        let cancel = delete_queued_jobs_for_sql(self.db().backend(), "domainId");
        let name = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let name: Option<String> = sqlx::query_scalar(
                "DELETE FROM domains WHERE project_id = $1 AND id = $2 RETURNING name",
            )
            .bind(project.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            sqlx::query(&cancel)
                .bind(CHECK_KIND)
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            name
        });
        name.ok_or(StoreError::NotFound)
    }

    /// Stores the result of a check made on request.
    #[tracing::instrument(level = "debug", skip(self, check))]
    pub async fn save_domain_check(
        &self,
        project: &ProjectId,
        id: &DomainId,
        check: &CheckedDomain,
    ) -> StoreResult<Domain> {
        let read = read_records_sql(self.db().backend());
        let n = on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            let n = save_check!(tx, read, project.as_str(), id.as_str(), check, now_ms());
            tx.commit().await?;
            n
        });
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        self.domain(project, id).await
    }

    /// Stores a background check's result, completes its job and schedules the next check, in
    /// one transaction guarded by the job's lease. `None` when the worker lost the lease; the
    /// domain may have been deleted meanwhile, in which case only the job completes.
    #[tracing::instrument(level = "debug", skip_all, fields(domain = %domain.id))]
    pub async fn finish_domain_check(
        &self,
        domain: &Domain,
        lease: &Lease,
        check: &CheckedDomain,
        next: &NewJob,
    ) -> StoreResult<Option<()>> {
        let now = now_ms();
        let next = check_job(&domain.id, &domain.project_id, next)?;
        let result = serde_json::json!({
            "domainId": domain.id.as_str(),
            "status": check.status.as_str(),
        });
        let read = read_records_sql(self.db().backend());
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &result, now).await? {
                return Ok(None);
            }
            let updated = save_check!(
                tx,
                read,
                domain.project_id.as_str(),
                domain.id.as_str(),
                check,
                now
            );
            if updated == 1 {
                tx.insert_job(&next, now).await?;
            }
            tx.commit().await?;
        });
        Ok(Some(()))
    }

    /// Ends a check that could not be made (the DNS plugin kept failing) without changing the
    /// domain: completes the job with the error and queues the next check, in one transaction,
    /// so that one failed check never ends the chain. `None` when the lease was lost.
    #[tracing::instrument(level = "debug", skip_all, fields(domain = %domain.id))]
    pub async fn reschedule_domain_check(
        &self,
        domain: &Domain,
        lease: &Lease,
        error: &str,
        next: &NewJob,
    ) -> StoreResult<Option<()>> {
        let now = now_ms();
        let next = check_job(&domain.id, &domain.project_id, next)?;
        let result = serde_json::json!({ "domainId": domain.id.as_str(), "error": error });
        on_db_write!(self.db(), pool => {
            let mut tx = pool.begin_write().await?;
            if !tx.complete_job(lease, &result, now).await? {
                return Ok(None);
            }
            tx.insert_job(&next, now).await?;
            tx.commit().await?;
        });
        Ok(Some(()))
    }

    /// The project's verified domains among `names` (a host and its parents), each with its
    /// DKIM signing identity: one read answers both who may send and how it is signed.
    /// Concurrent sends from one domain share a read ([`super::rounds`]), each answered by a
    /// read that started after it asked.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn verified_domains(
        &self,
        project: &ProjectId,
        names: &[String],
    ) -> StoreResult<Vec<(VerifiedDomain, SigningDomain)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        self.domain_lookups
            .join(
                (project.as_str().to_string(), names.to_vec()),
                |_| self.read_verified_domains(project, names),
                |found, _| found.clone(),
            )
            .await
    }

    async fn read_verified_domains(
        &self,
        project: &ProjectId,
        names: &[String],
    ) -> StoreResult<Vec<(VerifiedDomain, SigningDomain)>> {
        let list = super::dialect::placeholders(2, names.len());
        let sql = format!(
            "SELECT {SIGNING_COLUMNS}, allow_subdomains FROM domains \
             WHERE project_id = $1 AND status = 'verified' AND name IN ({list})"
        );
        let rows: Vec<VerifiedRow> = on_db!(self.db(), pool => {
            let mut q = sqlx::query_as(&sql).bind(project.as_str());
            for n in names {
                q = q.bind(n);
            }
            q.fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(|row| {
                let verified = VerifiedDomain {
                    name: row.signing.name.clone(),
                    allow_subdomains: row.allow_subdomains,
                };
                (verified, signing_of(row.signing))
            })
            .collect())
    }

    /// The DKIM signing identity of a verified domain of the project.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn signing_domain(
        &self,
        project: &ProjectId,
        name: &str,
    ) -> StoreResult<Option<SigningDomain>> {
        let sql = format!(
            "SELECT {SIGNING_COLUMNS} FROM domains \
             WHERE project_id = $1 AND name = $2 AND status = 'verified'"
        );
        let row: Option<SigningRow> = on_db!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(project.as_str())
                .bind(name)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(signing_of))
    }
}

/// The columns of a domain's signing identity, in [`SigningRow`]'s order.
const SIGNING_COLUMNS: &str = "name, dkim_selector, dkim_private_key, dkim_ed25519_selector, \
     dkim_ed25519_private_key, records";

/// A domain's signing identity as stored ([`SIGNING_COLUMNS`]).
#[derive(FromRow)]
struct SigningRow {
    name: String,
    dkim_selector: String,
    dkim_private_key: String,
    dkim_ed25519_selector: Option<String>,
    dkim_ed25519_private_key: Option<String>,
    records: Json<Vec<DnsRecordState>>,
}

/// A verified domain's row: its signing identity and whether its subdomains may send.
#[derive(FromRow)]
struct VerifiedRow {
    #[sqlx(flatten)]
    signing: SigningRow,
    allow_subdomains: bool,
}

/// The signing identity of a domain's row.
fn signing_of(row: SigningRow) -> SigningDomain {
    let SigningRow {
        name,
        dkim_selector: selector,
        dkim_private_key: private_key,
        dkim_ed25519_selector: ed_selector,
        dkim_ed25519_private_key: ed_key,
        records,
    } = row;
    // Ed25519 signs once its record was found: a signature whose key is not published would
    // only fail at the receiver.
    let ed25519 = match (ed_selector, ed_key) {
        (Some(selector), Some(private_key)) => {
            let record = dkim_record_name(&name, &selector);
            records
                .0
                .iter()
                .any(|r| r.name == record && r.status == RecordStatus::Verified)
                .then_some(Ed25519Signing {
                    selector,
                    private_key,
                })
        }
        _ => None,
    };
    SigningDomain {
        name,
        selector,
        private_key,
        ed25519,
    }
}

/// Reads a domain's records (binds project, id), locking its row on PostgreSQL.
fn read_records_sql(backend: super::Backend) -> String {
    format!(
        "SELECT records FROM domains WHERE project_id = $1 AND id = $2{}",
        super::dialect::for_update(backend)
    )
}

/// Writes a check; binds id, status, records, reason, now, project. `verified_at` keeps the first
/// verification time.
const SAVE_CHECK: &str = "UPDATE domains SET status = $2, records = $3, failure_reason = $4, \
     last_checked_at = $5, updated_at = $5, \
     verified_at = CASE WHEN $2 = 'verified' AND verified_at IS NULL THEN $5 ELSE verified_at END \
     WHERE id = $1 AND project_id = $6";
