//! `billing-none`, the default billing plugin: billing is off; checkout, the portal, invoices and
//! webhooks answer `disabled` with a message that says so.

use herald_sdk::billing::{BillingError, CheckoutRequest, Guest, Invoice, Session, Webhook};

const OFF: &str = "billing is off in this deployment (billing plugin `none`)";

struct NoBilling;

impl Guest for NoBilling {
    fn enabled() -> bool {
        false
    }

    fn checkout(_request: CheckoutRequest) -> Result<Session, BillingError> {
        Err(BillingError::Disabled(OFF.into()))
    }

    fn portal(_project_id: String, _return_url: String) -> Result<Session, BillingError> {
        Err(BillingError::Disabled(OFF.into()))
    }

    fn invoices(_project_id: String) -> Result<Vec<Invoice>, BillingError> {
        Err(BillingError::Disabled(OFF.into()))
    }

    fn parse_webhook(
        _webhook: Webhook,
    ) -> Result<Vec<herald_sdk::billing::BillingEvent>, BillingError> {
        Err(BillingError::Disabled(OFF.into()))
    }
}

herald_sdk::export_billing!(NoBilling);
