//! `billing-stripe`: checkout, the customer portal, invoices and payment webhooks through
//! Stripe's API, using only the `http` capability (granted `api.stripe.com`), `clock` (for the
//! webhook timestamp tolerance) and the plugin's own settings:
//!
//! ```toml
//! [plugins]
//! billing = "stripe"
//! billing_webhook_secret = "whsec_…"   # the webhook endpoint's signing secret
//!
//! [plugins.settings.stripe]
//! secret_key = "sk_live_…"
//! price_pro = "price_…"      # one `price_<plan>` per plan sold
//! price_team = "price_…"
//! # api_base = "https://api.stripe.com"
//! # webhook_tolerance_seconds = "300"
//! ```
//!
//! A project's Stripe customer carries `metadata[herald_project]`; checkouts find it (or create
//! it) by that, the portal and invoices look it up the same way, and subscriptions carry
//! `metadata[herald_project]` and `metadata[herald_plan]` so webhooks name both.

mod signature;
mod stripe;

use herald_sdk::billing::{
    BillingError, BillingEvent, CheckoutRequest, Guest, Invoice, Session, Webhook,
};

use crate::stripe::Stripe;

struct StripeBilling;

impl Guest for StripeBilling {
    fn enabled() -> bool {
        true
    }

    fn checkout(request: CheckoutRequest) -> Result<Session, BillingError> {
        let stripe = Stripe::from_settings()?;
        let price = stripe.price(&request.plan)?;
        let customer = match stripe.find_customer(&request.project_id)? {
            Some(id) => id,
            None => stripe.create_customer(&request.project_id, &request.email)?,
        };
        let url = stripe.checkout_session(&request, &customer, &price)?;
        Ok(Session { url })
    }

    fn portal(project_id: String, return_url: String) -> Result<Session, BillingError> {
        let stripe = Stripe::from_settings()?;
        let Some(customer) = stripe.find_customer(&project_id)? else {
            return Err(BillingError::NoCustomer(
                "this project has no billing account yet: start a checkout first".into(),
            ));
        };
        let url = stripe.portal_session(&customer, &return_url)?;
        Ok(Session { url })
    }

    fn invoices(project_id: String) -> Result<Vec<Invoice>, BillingError> {
        let stripe = Stripe::from_settings()?;
        match stripe.find_customer(&project_id)? {
            Some(customer) => stripe.invoices(&customer),
            None => Ok(Vec::new()),
        }
    }

    fn parse_webhook(webhook: Webhook) -> Result<Vec<BillingEvent>, BillingError> {
        let secret = webhook
            .secret
            .clone()
            .or_else(|| herald_sdk::settings::get("webhook_secret"))
            .ok_or_else(|| {
                BillingError::Unauthenticated(
                    "no webhook signing secret is configured (plugins.billing_webhook_secret)"
                        .into(),
                )
            })?;
        let header = webhook
            .headers
            .iter()
            .find(|(name, _)| name == "stripe-signature")
            .map(|(_, value)| value.as_str())
            .ok_or_else(|| {
                BillingError::Unauthenticated("the Stripe-Signature header is missing".into())
            })?;
        let tolerance = herald_sdk::settings::get("webhook_tolerance_seconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(signature::DEFAULT_TOLERANCE_SECONDS);
        let now = herald_sdk::clock::now() / 1000;
        signature::verify(header, &webhook.body, &secret, now, tolerance)
            .map_err(BillingError::Unauthenticated)?;
        let event: serde_json::Value = serde_json::from_slice(&webhook.body)
            .map_err(|e| BillingError::Provider(format!("the webhook body is not JSON: {e}")))?;
        Ok(stripe::billing_events(&event))
    }
}

herald_sdk::export_billing!(StripeBilling);
