//! Host-side values of the `billing` world and their conversion to and from the WIT types. Only
//! what the host calls (`enabled`, `checkout`) has a host-side value.

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
            wit::BillingError::Provider(m) => BillingError::Provider(m),
        }
    }
}
