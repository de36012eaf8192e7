//! Host-side values of the `billing` world and their conversion to and from the WIT types.

use crate::plugins::bindings::billing::exports::herald::plugin::billing_provider as wit;

/// Starting a checkout for a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckoutRequest {
    /// The paying project.
    pub project_id: String,
    /// The plan to buy.
    pub plan: String,
    /// The customer's email address.
    pub email: String,
    /// Where to send the user after paying.
    pub success_url: String,
    /// Where to send the user after cancelling.
    pub cancel_url: String,
}

/// A page to send the user to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The page's URL.
    pub url: String,
}

/// Why a billing call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BillingError {
    /// Billing is off in this deployment (the message says so).
    Disabled(String),
    /// A webhook failed authentication.
    Unauthenticated(String),
    /// The plan is not one this deployment sells.
    UnknownPlan(String),
    /// The project has no customer account with the provider yet.
    NoCustomer(String),
    /// The provider failed.
    Provider(String),
}

impl From<&CheckoutRequest> for wit::CheckoutRequest {
    fn from(request: &CheckoutRequest) -> wit::CheckoutRequest {
        wit::CheckoutRequest {
            project_id: request.project_id.clone(),
            plan: request.plan.clone(),
            email: request.email.clone(),
            success_url: request.success_url.clone(),
            cancel_url: request.cancel_url.clone(),
        }
    }
}

impl From<wit::Session> for Session {
    fn from(session: wit::Session) -> Session {
        Session { url: session.url }
    }
}

impl From<wit::BillingError> for BillingError {
    fn from(err: wit::BillingError) -> BillingError {
        match err {
            wit::BillingError::Disabled(m) => BillingError::Disabled(m),
            wit::BillingError::Unauthenticated(m) => BillingError::Unauthenticated(m),
            wit::BillingError::UnknownPlan(m) => BillingError::UnknownPlan(m),
            wit::BillingError::NoCustomer(m) => BillingError::NoCustomer(m),
            wit::BillingError::Provider(m) => BillingError::Provider(m),
        }
    }
}

/// One invoice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoice {
    /// The provider's id.
    pub id: String,
    /// The amount in the currency's smallest unit.
    pub amount: u64,
    /// ISO 4217 currency code.
    pub currency: String,
    /// `draft`, `open`, `paid`, `void` or `uncollectible`.
    pub status: String,
    /// When it was issued (ms since the epoch).
    pub created_at: i64,
    /// A page showing it, if any.
    pub url: Option<String>,
}

impl From<wit::Invoice> for Invoice {
    fn from(invoice: wit::Invoice) -> Invoice {
        Invoice {
            id: invoice.id,
            amount: invoice.amount,
            currency: invoice.currency,
            status: invoice.status,
            created_at: invoice.created_at,
            url: invoice.url,
        }
    }
}

/// A provider webhook call, as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    /// Request headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Vec<u8>,
    /// The configured signing secret, if any.
    pub secret: Option<String>,
}

impl From<&Webhook> for wit::Webhook {
    fn from(webhook: &Webhook) -> wit::Webhook {
        wit::Webhook {
            headers: webhook.headers.clone(),
            body: webhook.body.clone(),
            secret: webhook.secret.clone(),
        }
    }
}

/// A billing change parsed from a webhook.
#[derive(Clone, Debug, PartialEq)]
pub struct BillingEvent {
    /// e.g. `subscription.updated`, `invoice.paid`.
    pub kind: String,
    /// The project it concerns, when known.
    pub project_id: Option<String>,
    /// Provider detail (a JSON object; `null` when the plugin sent something else).
    pub detail: serde_json::Value,
}

impl From<wit::BillingEvent> for BillingEvent {
    fn from(event: wit::BillingEvent) -> BillingEvent {
        BillingEvent {
            kind: event.kind,
            project_id: event.project_id,
            detail: serde_json::from_str(&event.detail).unwrap_or(serde_json::Value::Null),
        }
    }
}
