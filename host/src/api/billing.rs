//! Billing, through the active billing plugin (`plugins.billing`): checkout and the customer
//! portal, per-category caps, the current period's consumption, invoices, and the payment
//! provider's webhooks (`POST /webhooks/incoming/payments`). Caps and consumption are Herald's
//! own and work with every plugin, `none` included. `OWNER` only (decisions.md).

use poem::Request;
use poem::http::StatusCode;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::error::{ApiError, ErrorCode, FieldError};
use super::extract::{DashboardAuth, JsonBody, OptionalJsonBody, header_pairs};
use super::notify::{NotificationBody, NotifyResult};
use super::state::AppState;
use super::timestamp::Timestamp;
use super::users::membership;
use crate::domain::billing::{BillingLimits, MAX_CAP, Period, UsageCategory, state_change};
use crate::domain::project::Project;
use crate::plugins::{BillingError, CheckoutRequest, Webhook};

/// Longest redirect URL accepted.
const MAX_URL: usize = 2048;

/// Starting a checkout.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckoutBody {
    /// The plan to buy, as the billing plugin names it (for `stripe`, one with a
    /// `price_<plan>` setting).
    #[oai(validator(min_length = 1, max_length = 64))]
    pub plan: String,
    /// Where the provider sends the user after paying; defaults to the dashboard.
    #[oai(nullable)]
    #[serde(default)]
    pub success_url: Option<String>,
    /// Where the provider sends the user after cancelling; defaults to the dashboard.
    #[oai(nullable)]
    #[serde(default)]
    pub cancel_url: Option<String>,
}

/// Opening the portal.
#[derive(Object, Deserialize, Default)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PortalBody {
    /// Where the portal's "back" link leads; defaults to the dashboard.
    #[oai(nullable)]
    #[serde(default)]
    pub return_url: Option<String>,
}

/// A page of the billing provider to send the user to.
#[derive(Object)]
pub struct BillingSessionBody {
    /// The page's URL.
    pub url: String,
}

/// Per-category caps for the billing period; null means no cap. A capped operation past its
/// cap answers 429 `BILLING_LIMIT_EXCEEDED` and writes nothing.
#[derive(Object, Deserialize)]
#[oai(rename_all = "camelCase")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BillingLimitsBody {
    /// Emails queued per period (through `/v1/send`, campaigns and workflows; suppressed ones
    /// do not count).
    #[oai(nullable)]
    #[oai(validator(minimum(value = "0"), maximum(value = "1000000000000")))]
    #[serde(default)]
    pub emails: Option<i64>,
    /// Contacts created per period.
    #[oai(nullable)]
    #[oai(validator(minimum(value = "0"), maximum(value = "1000000000000")))]
    #[serde(default)]
    pub contacts: Option<i64>,
    /// Events tracked per period (the service's own `email.*`, `segment.*` and
    /// `contact.(un)subscribed` do not count).
    #[oai(nullable)]
    #[oai(validator(minimum(value = "0"), maximum(value = "1000000000000")))]
    #[serde(default)]
    pub events: Option<i64>,
}

impl From<BillingLimits> for BillingLimitsBody {
    fn from(limits: BillingLimits) -> BillingLimitsBody {
        BillingLimitsBody {
            emails: limits.emails,
            contacts: limits.contacts,
            events: limits.events,
        }
    }
}

/// One category's use and cap.
#[derive(Object)]
pub struct CategoryUsageBody {
    /// Used in the period.
    pub used: i64,
    /// The cap; null when there is none.
    #[oai(nullable)]
    pub limit: Option<i64>,
    /// What is left under the cap; null when there is none.
    #[oai(nullable)]
    pub remaining: Option<i64>,
}

/// The current period's consumption.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct ConsumptionBody {
    /// The period's first instant (calendar month, UTC).
    pub period_start: Timestamp,
    /// The next period's first instant.
    pub period_end: Timestamp,
    /// Whether a billing provider is configured (`GET /config` says the same).
    pub billing_enabled: bool,
    /// The plan the provider last reported; null when none.
    #[oai(nullable)]
    pub plan: Option<String>,
    /// The subscription's status as last reported (`active`, `past_due`, `canceled`…); null
    /// when none.
    #[oai(nullable)]
    pub subscription_status: Option<String>,
    /// Emails queued.
    pub emails: CategoryUsageBody,
    /// Contacts created.
    pub contacts: CategoryUsageBody,
    /// Events tracked.
    pub events: CategoryUsageBody,
}

/// One invoice.
#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct InvoiceBody {
    /// The provider's id.
    pub id: String,
    /// The amount in the currency's smallest unit (cents).
    pub amount: u64,
    /// ISO 4217 currency code.
    pub currency: String,
    /// `draft`, `open`, `paid`, `void` or `uncollectible`.
    pub status: String,
    /// When it was issued.
    pub created_at: Timestamp,
    /// A page showing it; null when the provider has none.
    #[oai(nullable)]
    pub url: Option<String>,
}

/// A project's invoices, newest first.
#[derive(Object)]
pub struct InvoicesBody {
    /// The invoices (empty when billing is off or nothing was billed yet).
    pub data: Vec<InvoiceBody>,
}

/// The project, when the caller is its `OWNER`.
async fn owned(state: &AppState, auth: &DashboardAuth, id: &str) -> Result<Project, ApiError> {
    let (project, role) = membership(state, auth, id).await?;
    if !role.can_manage_billing() {
        return Err(ApiError::forbidden(
            "only the project's OWNER may manage its billing",
        ));
    }
    Ok(project)
}

/// `url` when it is an absolute `http(s)` URL, else the dashboard's address.
fn redirect_url(state: &AppState, field: &str, url: Option<String>) -> Result<String, ApiError> {
    let Some(url) = url else {
        return Ok(state.settings().dashboard_url());
    };
    let ok = url.len() <= MAX_URL
        && reqwest::Url::parse(&url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
    if ok {
        Ok(url)
    } else {
        Err(ApiError::invalid_field(
            field,
            "invalid",
            format!("must be an absolute http(s) URL of at most {MAX_URL} characters"),
        ))
    }
}

/// The answer to a billing plugin's refusal.
fn refused(err: BillingError) -> ApiError {
    match err {
        BillingError::Disabled(message) => ApiError::conflict(message)
            .suggest("the operator enables billing with plugins.billing (e.g. `stripe`)"),
        BillingError::NoCustomer(message) => ApiError::conflict(message),
        BillingError::UnknownPlan(message) => {
            ApiError::validation(vec![FieldError::new("plan", "invalid", message)])
        }
        BillingError::Unauthenticated(message) => {
            ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
        }
        BillingError::Provider(message) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::PluginError,
            format!("the billing provider failed: {message}"),
        )
        .suggest("retry later; if it persists, the operator should check the billing settings"),
    }
}

fn usage(used: i64, limit: Option<i64>) -> CategoryUsageBody {
    CategoryUsageBody {
        used,
        limit,
        remaining: limit.map(|cap| (cap - used).max(0)),
    }
}

/// The billing endpoints.
#[derive(Default)]
pub struct BillingApi;

#[OpenApi(tag = "ApiTags::Projects")]
impl BillingApi {
    /// Start a checkout
    ///
    /// `OWNER` only. A checkout page of the billing provider for `plan`; the provider's webhook
    /// reports the outcome. 409 when billing is off in this deployment.
    #[oai(
        path = "/users/@me/projects/:id/checkout",
        method = "post",
        operation_id = "createCheckout"
    )]
    async fn checkout(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        body: JsonBody<CheckoutBody>,
    ) -> Result<Json<BillingSessionBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        let body = body.0;
        if body.plan.is_empty() || body.plan.chars().count() > 64 {
            return Err(ApiError::invalid_field(
                "plan",
                "invalid",
                "must be 1 to 64 characters",
            ));
        }
        let request = CheckoutRequest {
            project_id: project.id.to_string(),
            plan: body.plan,
            email: auth.user.email.to_string(),
            success_url: redirect_url(&state, "successUrl", body.success_url)?,
            cancel_url: redirect_url(&state, "cancelUrl", body.cancel_url)?,
        };
        let session = state
            .plugins()
            .billing_checkout(&request)
            .await?
            .map_err(refused)?;
        Ok(Json(BillingSessionBody { url: session.url }))
    }

    /// Open the billing portal
    ///
    /// `OWNER` only. The provider's customer portal (payment methods, plan changes,
    /// cancellation). 409 when billing is off or the project never checked out.
    #[oai(
        path = "/users/@me/projects/:id/billing-portal",
        method = "post",
        operation_id = "openBillingPortal"
    )]
    async fn portal(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        body: OptionalJsonBody<PortalBody>,
    ) -> Result<Json<BillingSessionBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        let body = body.0.unwrap_or_default();
        let return_url = redirect_url(&state, "returnUrl", body.return_url)?;
        let session = state
            .plugins()
            .billing_portal(project.id.as_str(), &return_url)
            .await?
            .map_err(refused)?;
        Ok(Json(BillingSessionBody { url: session.url }))
    }

    /// Billing caps
    ///
    /// `OWNER` only. Per-category caps of the billing period; null is no cap.
    #[oai(
        path = "/users/@me/projects/:id/billing-limits",
        method = "get",
        operation_id = "getBillingLimits"
    )]
    async fn limits(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<BillingLimitsBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        Ok(Json(
            state.store().billing_limits(&project.id).await?.into(),
        ))
    }

    /// Set billing caps
    ///
    /// `OWNER` only. Replaces the caps: a category left out or null has none. A cap below the
    /// period's use stops that category at once.
    #[oai(
        path = "/users/@me/projects/:id/billing-limits",
        method = "put",
        operation_id = "setBillingLimits"
    )]
    async fn set_limits(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
        body: JsonBody<BillingLimitsBody>,
    ) -> Result<Json<BillingLimitsBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        let body = body.0;
        let errors: Vec<FieldError> = [
            ("emails", body.emails),
            ("contacts", body.contacts),
            ("events", body.events),
        ]
        .into_iter()
        .filter(|(_, cap)| cap.is_some_and(|c| !(0..=MAX_CAP).contains(&c)))
        .map(|(field, _)| {
            FieldError::new(
                field,
                "out_of_range",
                format!("must be null (no cap) or between 0 and {MAX_CAP}"),
            )
        })
        .collect();
        if !errors.is_empty() {
            return Err(ApiError::validation(errors));
        }
        let limits = BillingLimits {
            emails: body.emails,
            contacts: body.contacts,
            events: body.events,
        };
        state
            .store()
            .set_billing_limits(&project.id, &limits)
            .await?;
        Ok(Json(limits.into()))
    }

    /// Consumption this period
    ///
    /// `OWNER` only. What the project used in the current billing period (the calendar month,
    /// UTC) against its caps, and its plan as the billing provider last reported it.
    #[oai(
        path = "/users/@me/projects/:id/billing-consumption",
        method = "get",
        operation_id = "getBillingConsumption"
    )]
    async fn consumption(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<ConsumptionBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        let period = Period::containing(chrono::Utc::now());
        let store = state.store();
        let limits = store.billing_limits(&project.id).await?;
        let used = store.usage_in_period(&project.id, &period.key()).await?;
        let billing = store.billing_state(&project.id).await?;
        let of = |category: UsageCategory| {
            let n = used
                .iter()
                .find(|(c, _)| *c == category)
                .map_or(0, |(_, n)| *n);
            usage(n, limits.of(category))
        };
        Ok(Json(ConsumptionBody {
            period_start: Timestamp(period.start.timestamp_millis()),
            period_end: Timestamp(period.end.timestamp_millis()),
            billing_enabled: state.plugins().billing_enabled().await?,
            plan: billing.as_ref().and_then(|b| b.plan.clone()),
            subscription_status: billing.map(|b| b.status),
            emails: of(UsageCategory::Emails),
            contacts: of(UsageCategory::Contacts),
            events: of(UsageCategory::Events),
        }))
    }

    /// Invoices
    ///
    /// `OWNER` only. The project's invoices from the billing provider, newest first; empty
    /// when billing is off.
    #[oai(
        path = "/users/@me/projects/:id/billing-invoices",
        method = "get",
        operation_id = "listInvoices"
    )]
    async fn invoices(
        &self,
        auth: DashboardAuth,
        state: poem::web::Data<&AppState>,
        /// The project's id.
        id: Path<String>,
    ) -> Result<Json<InvoicesBody>, ApiError> {
        let project = owned(&state, &auth, &id).await?;
        let invoices = match state
            .plugins()
            .billing_invoices(project.id.as_str())
            .await?
        {
            Ok(invoices) => invoices,
            Err(BillingError::Disabled(_)) => Vec::new(),
            Err(other) => return Err(refused(other)),
        };
        Ok(Json(InvoicesBody {
            data: invoices
                .into_iter()
                .map(|i| InvoiceBody {
                    id: i.id,
                    amount: i.amount,
                    currency: i.currency,
                    status: i.status,
                    created_at: Timestamp(i.created_at),
                    url: i.url,
                })
                .collect(),
        }))
    }
}

/// The payment provider's receiver.
#[derive(Default)]
pub struct PaymentsWebhookApi;

#[OpenApi(tag = "ApiTags::Internal")]
impl PaymentsWebhookApi {
    /// Receive payment notifications
    ///
    /// For the payment provider, not for applications: the active billing plugin authenticates
    /// the call (`stripe` checks `Stripe-Signature` against `plugins.billing_webhook_secret`)
    /// and parses it into billing events; each one about a project of this deployment records
    /// its plan and subscription status. 409 when billing is off, 401 when the signature does
    /// not verify.
    #[oai(
        path = "/webhooks/incoming/payments",
        method = "post",
        operation_id = "receivePaymentNotification"
    )]
    async fn payments(
        &self,
        state: poem::web::Data<&AppState>,
        req: &Request,
        body: NotificationBody,
    ) -> Result<Json<NotifyResult>, ApiError> {
        let webhook = Webhook {
            headers: header_pairs(req),
            body: body.0,
            secret: state.settings().plugins.billing_webhook_secret.clone(),
        };
        let events = match state.plugins().billing_parse_webhook(&webhook).await? {
            Ok(events) => events,
            Err(BillingError::Provider(message)) => return Err(ApiError::bad_request(message)),
            Err(other) => return Err(refused(other)),
        };
        let mut result = NotifyResult {
            received: events.len(),
            applied: 0,
            ignored: 0,
        };
        for event in events {
            let change = state_change(&event.kind, &event.detail);
            let (Some(project), Some(change)) = (event.project_id.as_deref(), change) else {
                result.ignored += 1;
                continue;
            };
            let recorded = state
                .store()
                .record_billing_state(
                    project,
                    change.plan.as_deref(),
                    change.clear_plan,
                    &change.status,
                    &event.detail,
                )
                .await?;
            if recorded {
                tracing::info!(project_id = project, kind = %event.kind, status = %change.status, "billing state changed");
                result.applied += 1;
            } else {
                result.ignored += 1;
            }
        }
        Ok(Json(result))
    }
}
