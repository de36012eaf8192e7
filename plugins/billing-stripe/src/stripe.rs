//! Calls to Stripe's REST API (form-encoded requests, JSON answers) and the mapping of its
//! webhook events to Herald's billing events.

use herald_sdk::billing::{BillingError, BillingEvent, CheckoutRequest, Invoice};
use herald_sdk::http::{self, Request};
use serde_json::{Value, json};

/// The metadata key naming a customer's or a subscription's Herald project.
const PROJECT_KEY: &str = "herald_project";
/// The metadata key naming a subscription's plan.
const PLAN_KEY: &str = "herald_plan";

/// A configured client.
pub struct Stripe {
    base: String,
    secret_key: String,
}

impl Stripe {
    /// The client of the plugin's settings (`secret_key`, `api_base`).
    pub fn from_settings() -> Result<Stripe, BillingError> {
        let secret_key = herald_sdk::settings::get("secret_key").ok_or_else(|| {
            BillingError::Provider(
                "the Stripe secret key is not set (plugins.settings.stripe.secret_key)".into(),
            )
        })?;
        let base = herald_sdk::settings::get("api_base")
            .unwrap_or_else(|| "https://api.stripe.com".into())
            .trim_end_matches('/')
            .to_string();
        Ok(Stripe { base, secret_key })
    }

    /// The price of `plan` (setting `price_<plan>`).
    pub fn price(&self, plan: &str) -> Result<String, BillingError> {
        let valid = !plan.is_empty()
            && plan.len() <= 64
            && plan
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        match valid
            .then(|| herald_sdk::settings::get(&format!("price_{}", plan.to_ascii_lowercase())))
            .flatten()
        {
            Some(price) => Ok(price),
            None => Err(BillingError::UnknownPlan(format!(
                "plan `{plan}` is not sold here (the operator sets one `price_<plan>` per plan \
                 in plugins.settings.stripe)"
            ))),
        }
    }

    fn call(&self, method: &str, path: &str, form: Option<String>) -> Result<Value, BillingError> {
        let mut request = Request::new(method, &format!("{}{path}", self.base));
        request.headers.push((
            "authorization".into(),
            format!("Bearer {}", self.secret_key),
        ));
        if let Some(form) = form {
            request.headers.push((
                "content-type".into(),
                "application/x-www-form-urlencoded".into(),
            ));
            request.body = Some(form.into_bytes());
        }
        let response = http::send(&request).map_err(|e| {
            BillingError::Provider(format!("calling Stripe failed: {}", http::describe(&e)))
        })?;
        let body: Value = serde_json::from_slice(&response.body).map_err(|_| {
            BillingError::Provider(format!(
                "Stripe answered {} with a body that is not JSON",
                response.status
            ))
        })?;
        if !(200..300).contains(&response.status) {
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string();
            return Err(BillingError::Provider(format!(
                "Stripe answered {}: {message}",
                response.status
            )));
        }
        Ok(body)
    }

    /// The project's customer, found by its metadata.
    pub fn find_customer(&self, project_id: &str) -> Result<Option<String>, BillingError> {
        let query = format!(
            "metadata['{PROJECT_KEY}']:'{}'",
            project_id.replace('\'', "")
        );
        let path = format!(
            "/v1/customers/search?{}",
            form_urlencoded::Serializer::new(String::new())
                .append_pair("query", &query)
                .append_pair("limit", "1")
                .finish()
        );
        let found = self.call("GET", &path, None)?;
        Ok(found["data"][0]["id"].as_str().map(str::to_string))
    }

    /// Creates the project's customer.
    pub fn create_customer(&self, project_id: &str, email: &str) -> Result<String, BillingError> {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("email", email)
            .append_pair(&format!("metadata[{PROJECT_KEY}]"), project_id)
            .finish();
        let customer = self.call("POST", "/v1/customers", Some(form))?;
        id_of(&customer, "customer")
    }

    /// A subscription checkout session; answers its URL.
    pub fn checkout_session(
        &self,
        request: &CheckoutRequest,
        customer: &str,
        price: &str,
    ) -> Result<String, BillingError> {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("mode", "subscription")
            .append_pair("customer", customer)
            .append_pair("client_reference_id", &request.project_id)
            .append_pair("line_items[0][price]", price)
            .append_pair("line_items[0][quantity]", "1")
            .append_pair("success_url", &request.success_url)
            .append_pair("cancel_url", &request.cancel_url)
            .append_pair(&format!("metadata[{PROJECT_KEY}]"), &request.project_id)
            .append_pair(&format!("metadata[{PLAN_KEY}]"), &request.plan)
            .append_pair(
                &format!("subscription_data[metadata][{PROJECT_KEY}]"),
                &request.project_id,
            )
            .append_pair(
                &format!("subscription_data[metadata][{PLAN_KEY}]"),
                &request.plan,
            )
            .finish();
        let session = self.call("POST", "/v1/checkout/sessions", Some(form))?;
        url_of(&session, "checkout session")
    }

    /// A customer portal session; answers its URL.
    pub fn portal_session(&self, customer: &str, return_url: &str) -> Result<String, BillingError> {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("customer", customer)
            .append_pair("return_url", return_url)
            .finish();
        let session = self.call("POST", "/v1/billing_portal/sessions", Some(form))?;
        url_of(&session, "portal session")
    }

    /// The customer's invoices, newest first (Stripe's order), at most 100.
    pub fn invoices(&self, customer: &str) -> Result<Vec<Invoice>, BillingError> {
        let path = format!(
            "/v1/invoices?{}",
            form_urlencoded::Serializer::new(String::new())
                .append_pair("customer", customer)
                .append_pair("limit", "100")
                .finish()
        );
        let list = self.call("GET", &path, None)?;
        let items = list["data"].as_array().cloned().unwrap_or_default();
        Ok(items
            .iter()
            .filter_map(|invoice| {
                Some(Invoice {
                    id: invoice["id"].as_str()?.to_string(),
                    amount: invoice["total"]
                        .as_u64()
                        .or_else(|| invoice["amount_due"].as_u64())
                        .unwrap_or(0),
                    currency: invoice["currency"].as_str().unwrap_or("").to_uppercase(),
                    status: invoice["status"].as_str().unwrap_or("draft").to_string(),
                    created_at: invoice["created"].as_i64().unwrap_or(0) * 1000,
                    url: invoice["hosted_invoice_url"].as_str().map(str::to_string),
                })
            })
            .collect())
    }
}

fn id_of(object: &Value, what: &str) -> Result<String, BillingError> {
    object["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| BillingError::Provider(format!("Stripe's {what} has no id")))
}

fn url_of(object: &Value, what: &str) -> Result<String, BillingError> {
    object["url"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| BillingError::Provider(format!("Stripe's {what} has no url")))
}

/// The Herald billing events of one Stripe event (none for kinds Herald does not follow).
pub fn billing_events(event: &Value) -> Vec<BillingEvent> {
    let object = &event["data"]["object"];
    let kind = event["type"].as_str().unwrap_or("");
    let metadata_project = |metadata: &Value| metadata[PROJECT_KEY].as_str().map(str::to_string);
    let (herald_kind, project_id, detail) = match kind {
        "checkout.session.completed" => (
            "checkout.completed",
            object["client_reference_id"]
                .as_str()
                .map(str::to_string)
                .or_else(|| metadata_project(&object["metadata"])),
            json!({
                "plan": object["metadata"][PLAN_KEY],
                "status": "active",
                "customer": object["customer"],
                "subscription": object["subscription"],
            }),
        ),
        "customer.subscription.created" | "customer.subscription.updated" => (
            "subscription.updated",
            metadata_project(&object["metadata"]),
            json!({
                "plan": object["metadata"][PLAN_KEY],
                "status": object["status"],
                "subscription": object["id"],
            }),
        ),
        "customer.subscription.deleted" => (
            "subscription.deleted",
            metadata_project(&object["metadata"]),
            json!({ "status": "canceled", "subscription": object["id"] }),
        ),
        "invoice.paid" | "invoice.payment_failed" => (
            if kind == "invoice.paid" {
                "invoice.paid"
            } else {
                "invoice.payment_failed"
            },
            // Older API versions put the subscription's metadata at
            // `subscription_details`, newer ones under `parent`.
            metadata_project(&object["subscription_details"]["metadata"]).or_else(|| {
                metadata_project(&object["parent"]["subscription_details"]["metadata"])
            }),
            json!({
                "invoice": object["id"],
                "amount": object["amount_paid"],
                "currency": object["currency"],
                "status": if kind == "invoice.paid" { "active" } else { "past_due" },
            }),
        ),
        _ => return Vec::new(),
    };
    vec![BillingEvent {
        kind: herald_kind.to_string(),
        project_id,
        detail: detail.to_string(),
    }]
}
