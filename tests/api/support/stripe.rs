//! A loopback stand-in for Stripe's API: the endpoints the `stripe` billing plugin calls,
//! answering with Stripe's documented shapes (objects with `id` and `object`, lists as
//! `{object: "list", data, has_more}`, search results as `{object: "search_result", …}`, errors
//! as `{error: {type, message}}`), and checking the secret key as Stripe does (Bearer).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use poem::http::StatusCode;
use poem::web::{Data, Form, Query};
use poem::{EndpointExt, Request, Response, Route, handler};
use serde_json::{Value, json};

/// The secret key the fake accepts.
pub const SECRET_KEY: &str = "sk_test_herald";

/// What the fake holds and saw.
#[derive(Default)]
pub struct StripeState {
    /// Customers: id, email, metadata.
    pub customers: Vec<Value>,
    /// Every form posted, with its path.
    pub posts: Vec<(String, HashMap<String, String>)>,
}

/// A running fake.
pub struct FakeStripe {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<StripeState>>,
}

impl FakeStripe {
    /// Starts it on a random loopback port.
    pub async fn start() -> FakeStripe {
        let state = Arc::new(Mutex::new(StripeState::default()));
        let app = Route::new()
            .at("/v1/customers/search", poem::get(search_customers))
            .at("/v1/customers", poem::post(create_customer))
            .at("/v1/checkout/sessions", poem::post(checkout_session))
            .at("/v1/billing_portal/sessions", poem::post(portal_session))
            .at("/v1/invoices", poem::get(invoices))
            .data(state.clone());
        let addr = super::httpd::serve(app).await;
        FakeStripe { addr, state }
    }

    /// The API base to configure (`plugins.settings.stripe.api_base`).
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The forms posted to `path`.
    pub fn posts_to(&self, path: &str) -> Vec<HashMap<String, String>> {
        let state = self.state.lock().unwrap();
        state
            .posts
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(body.to_string())
}

/// Stripe's 401 unless the request carries the secret key.
fn denied(req: &Request) -> Option<Response> {
    let ok = req
        .header("authorization")
        .is_some_and(|v| v == format!("Bearer {SECRET_KEY}"));
    if ok {
        None
    } else {
        Some(json_response(
            StatusCode::UNAUTHORIZED,
            json!({ "error": { "type": "invalid_request_error",
                "message": "Invalid API Key provided: sk_***" } }),
        ))
    }
}

#[handler]
fn search_customers(
    req: &Request,
    Query(query): Query<HashMap<String, String>>,
    state: Data<&Arc<Mutex<StripeState>>>,
) -> Response {
    if let Some(denied) = denied(req) {
        return denied;
    }
    // The plugin searches `metadata['herald_project']:'<id>'`.
    let q = query.get("query").cloned().unwrap_or_default();
    let wanted = q
        .strip_prefix("metadata['herald_project']:'")
        .and_then(|rest| rest.strip_suffix('\''))
        .map(str::to_string);
    let state = state.lock().unwrap();
    let data: Vec<Value> = state
        .customers
        .iter()
        .filter(|c| {
            wanted
                .as_deref()
                .is_some_and(|w| c["metadata"]["herald_project"] == w)
        })
        .cloned()
        .collect();
    json_response(
        StatusCode::OK,
        json!({ "object": "search_result", "url": "/v1/customers/search",
                "has_more": false, "next_page": null, "data": data }),
    )
}

#[handler]
fn create_customer(
    req: &Request,
    Form(form): Form<HashMap<String, String>>,
    state: Data<&Arc<Mutex<StripeState>>>,
) -> Response {
    if let Some(denied) = denied(req) {
        return denied;
    }
    let mut state = state.lock().unwrap();
    let customer = json!({
        "id": format!("cus_{}", state.customers.len() + 1),
        "object": "customer",
        "email": form.get("email"),
        "metadata": { "herald_project": form.get("metadata[herald_project]") },
    });
    state.customers.push(customer.clone());
    state.posts.push(("/v1/customers".into(), form));
    json_response(StatusCode::OK, customer)
}

#[handler]
fn checkout_session(
    req: &Request,
    Form(form): Form<HashMap<String, String>>,
    state: Data<&Arc<Mutex<StripeState>>>,
) -> Response {
    if let Some(denied) = denied(req) {
        return denied;
    }
    if !form
        .get("line_items[0][price]")
        .is_some_and(|p| p.starts_with("price_"))
    {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({ "error": { "type": "invalid_request_error", "message": "No such price" } }),
        );
    }
    let mut state = state.lock().unwrap();
    let id = format!("cs_test_{}", state.posts.len() + 1);
    state.posts.push(("/v1/checkout/sessions".into(), form));
    json_response(
        StatusCode::OK,
        json!({ "id": id, "object": "checkout.session", "mode": "subscription",
                "url": format!("https://checkout.stripe.com/c/pay/{id}") }),
    )
}

#[handler]
fn portal_session(
    req: &Request,
    Form(form): Form<HashMap<String, String>>,
    state: Data<&Arc<Mutex<StripeState>>>,
) -> Response {
    if let Some(denied) = denied(req) {
        return denied;
    }
    let mut state = state.lock().unwrap();
    state
        .posts
        .push(("/v1/billing_portal/sessions".into(), form.clone()));
    json_response(
        StatusCode::OK,
        json!({ "id": "bps_1", "object": "billing_portal.session",
                "customer": form.get("customer"), "return_url": form.get("return_url"),
                "url": "https://billing.stripe.com/p/session/test_1" }),
    )
}

#[handler]
fn invoices(req: &Request, Query(query): Query<HashMap<String, String>>) -> Response {
    if let Some(denied) = denied(req) {
        return denied;
    }
    let customer = query.get("customer").cloned().unwrap_or_default();
    json_response(
        StatusCode::OK,
        json!({ "object": "list", "url": "/v1/invoices", "has_more": false, "data": [
            { "id": "in_2", "object": "invoice", "customer": customer, "total": 4900,
              "amount_due": 4900, "currency": "usd", "status": "open", "created": 1_767_225_600,
              "hosted_invoice_url": "https://invoice.stripe.com/i/in_2" },
            { "id": "in_1", "object": "invoice", "customer": customer, "total": 1900,
              "amount_due": 1900, "currency": "usd", "status": "paid", "created": 1_764_547_200,
              "hosted_invoice_url": null },
        ] }),
    )
}

/// A `Stripe-Signature` header for `body` signed at `t` with `secret`, as Stripe computes it.
pub fn signature(secret: &str, t: i64, body: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}
