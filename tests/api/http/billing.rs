//! Billing through the billing plugin: with `none`, billing is off but caps and consumption
//! work (usage metered in the transactions that create the work, 429 on the capped operation
//! only); with `stripe`, checkout, the portal, invoices and signed webhooks against a loopback
//! server that answers as Stripe does.

use reqwest::Method;
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject};
use crate::support::stripe::{FakeStripe, SECRET_KEY, signature};

const WEBHOOK_SECRET: &str = "whsec_test_herald";

async fn owner_call(
    app: &TestApp,
    p: &TestProject,
    method: Method,
    what: &str,
    body: Option<Value>,
) -> Reply {
    let path = format!("/users/@me/projects/{}/{what}", p.id);
    app.call_with(&p.owner, method, &path, None, body, &[])
        .await
}

async fn checkout(app: &TestApp, p: &TestProject, body: Value) -> Reply {
    owner_call(app, p, Method::POST, "checkout", Some(body)).await
}

async fn consumption(app: &TestApp, p: &TestProject) -> Value {
    let r = owner_call(app, p, Method::GET, "billing-consumption", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

async fn track(app: &TestApp, p: &TestProject, email: &str) -> Reply {
    app.post(
        "/v1/track",
        &p.public_key,
        json!({ "email": email, "event": "signed-in" }),
    )
    .await
}

#[tokio::test]
async fn with_billing_off_caps_stop_only_the_capped_operation_and_consumption_counts() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;

    // Billing is off: /config says so, checkout and the portal are 409, no invoices.
    let config = app.call(Method::GET, "/config", None, None).await;
    assert_eq!(config.body["billingEnabled"], false);
    checkout(&app, &p, json!({ "plan": "pro" }))
        .await
        .assert_error(409, "CONFLICT");
    let portal = owner_call(&app, &p, Method::POST, "billing-portal", Some(json!({}))).await;
    portal.assert_error(409, "CONFLICT");
    assert!(
        portal.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("billing is off")
    );
    let invoices = owner_call(&app, &p, Method::GET, "billing-invoices", None).await;
    assert_eq!(invoices.body, json!({ "data": [] }));

    // No caps by default.
    let limits = owner_call(&app, &p, Method::GET, "billing-limits", None).await;
    assert_eq!(
        limits.body,
        json!({ "emails": null, "contacts": null, "events": null })
    );
    let set = owner_call(
        &app,
        &p,
        Method::PUT,
        "billing-limits",
        Some(json!({ "emails": 2, "contacts": 3, "events": 2 })),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.body);
    owner_call(
        &app,
        &p,
        Method::PUT,
        "billing-limits",
        Some(json!({ "emails": -1 })),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");

    // Contacts: three are created, the fourth is refused; changing one still works.
    for email in ["a@example.com", "b@example.com", "c@example.com"] {
        p.contact(&app, email, json!({})).await;
    }
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "d@example.com" }),
        )
        .await;
    r.assert_error(429, "BILLING_LIMIT_EXCEEDED");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry > 0 && retry <= 31 * 86_400, "{retry}");
    let r = app
        .post(
            "/contacts",
            &p.secret_key,
            json!({ "email": "a@example.com", "data": { "plan": "pro" } }),
        )
        .await;
    assert!(
        r.status.is_success(),
        "an upsert of an existing contact: {}",
        r.body
    );

    // An import past the cap fails with the reason, without retrying, and adds nobody.
    let r = crate::http::jobs::upload(
        &app,
        &p.secret_key,
        "more.csv",
        "text/csv",
        b"email\ne@example.com\nf@example.com\n".to_vec(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let job = crate::http::jobs::wait_job(
        &app,
        &p.secret_key,
        "import",
        r.body["jobId"].as_str().unwrap(),
    )
    .await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job["error"].as_str().unwrap().contains("contacts cap"),
        "{job}"
    );

    // Events: two are tracked, the third is refused and writes nothing.
    assert_eq!(track(&app, &p, "a@example.com").await.status, 200);
    assert_eq!(track(&app, &p, "b@example.com").await.status, 200);
    track(&app, &p, "c@example.com")
        .await
        .assert_error(429, "BILLING_LIMIT_EXCEEDED");

    // Emails: two go, the third is refused in /v1/send's own error shape.
    for to in ["a@example.com", "b@example.com"] {
        let r = app
            .post(
                "/v1/send",
                &p.secret_key,
                json!({ "to": to, "from": "hi@acme.test", "subject": "Hi", "body": "<p>Hi</p>" }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "c@example.com", "from": "hi@acme.test", "subject": "Hi", "body": "x" }),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.body["error"], "BILLING_LIMIT_EXCEEDED");
    assert!(r.header("retry-after").is_some());

    let used = consumption(&app, &p).await;
    assert_eq!(used["billingEnabled"], false);
    assert_eq!(used["plan"], Value::Null);
    assert_eq!(
        used["emails"],
        json!({ "used": 2, "limit": 2, "remaining": 0 })
    );
    assert_eq!(
        used["contacts"],
        json!({ "used": 3, "limit": 3, "remaining": 0 })
    );
    assert_eq!(
        used["events"],
        json!({ "used": 2, "limit": 2, "remaining": 0 })
    );
    assert!(
        used["periodStart"]
            .as_str()
            .unwrap()
            .ends_with("-01T00:00:00.000Z")
    );
    let listed = app.get("/contacts", &p.secret_key).await;
    assert_eq!(
        listed.body["total"], 3,
        "nothing half-written: {}",
        listed.body
    );

    // Another project is not capped.
    let q = app.project().await;
    q.contact(&app, "d@example.com", json!({})).await;
    assert_eq!(consumption(&app, &q).await["contacts"]["used"], 1);

    // Lifting a cap lets the category go on at once.
    owner_call(
        &app,
        &p,
        Method::PUT,
        "billing-limits",
        Some(json!({ "emails": 2, "events": 2 })),
    )
    .await;
    p.contact(&app, "d@example.com", json!({})).await;
    assert_eq!(
        consumption(&app, &p).await["contacts"]["remaining"],
        Value::Null
    );

    // Billing is the OWNER's: an ADMIN is refused, a stranger sees no project.
    let admin = app.verified_user("admin@example.com").await;
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            &format!("/projects/{}/members", p.id),
            None,
            Some(json!({ "email": "admin@example.com", "role": "admin" })),
            &[("X-Project-Id", p.id.as_str())],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let path = format!("/users/@me/projects/{}/billing-limits", p.id);
    app.call_with(&admin, Method::GET, &path, None, None, &[])
        .await
        .assert_error(403, "FORBIDDEN");
    let path = format!("/users/@me/projects/{}/billing-consumption", p.id);
    app.call_with(&q.owner, Method::GET, &path, None, None, &[])
        .await
        .assert_error(404, "NOT_FOUND");

    // With billing off, payment webhooks are refused.
    let r = app
        .call(
            Method::POST,
            "/webhooks/incoming/payments",
            None,
            Some(json!({})),
        )
        .await;
    r.assert_error(409, "CONFLICT");
}

async fn post_webhook(app: &TestApp, body: &str, header: Option<String>) -> Reply {
    let mut req = reqwest::Client::new()
        .post(app.url("/webhooks/incoming/payments"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(header) = header {
        req = req.header("stripe-signature", header);
    }
    crate::support::harness::read(req.send().await.unwrap()).await
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test]
async fn stripe_checks_out_opens_the_portal_lists_invoices_and_applies_signed_webhooks() {
    let stripe = FakeStripe::start().await;
    let base = stripe.base();
    let app = TestApp::spawn_with(move |s| {
        s.plugins.billing = "stripe".into();
        s.plugins.billing_http_allow = vec!["127.0.0.1".into()];
        s.plugins.billing_http_allow_private = true;
        s.plugins.billing_webhook_secret = Some(WEBHOOK_SECRET.into());
        s.plugins.settings.insert(
            "stripe".into(),
            [
                ("secret_key", SECRET_KEY),
                ("api_base", base.as_str()),
                ("price_pro", "price_pro_monthly"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
    })
    .await;
    let p = app.project().await;
    let config = app.call(Method::GET, "/config", None, None).await;
    assert_eq!(config.body["billingEnabled"], true);

    // No customer yet: no portal, no invoices.
    owner_call(&app, &p, Method::POST, "billing-portal", None)
        .await
        .assert_error(409, "CONFLICT");
    let r = owner_call(&app, &p, Method::GET, "billing-invoices", None).await;
    assert_eq!(r.body["data"], json!([]));

    // A plan that is not sold is the caller's mistake.
    let r = checkout(&app, &p, json!({ "plan": "gold" })).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["plan"]);
    checkout(
        &app,
        &p,
        json!({ "plan": "pro", "successUrl": "javascript:alert(1)" }),
    )
    .await
    .assert_error(422, "VALIDATION_ERROR");

    // Checkout: a customer tagged with the project, a subscription session for its price.
    let r = checkout(
        &app,
        &p,
        json!({ "plan": "pro", "successUrl": "https://app.example/paid" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body["url"]
            .as_str()
            .unwrap()
            .starts_with("https://checkout.stripe.com/c/pay/cs_test_")
    );
    let customers = stripe.posts_to("/v1/customers");
    assert_eq!(customers.len(), 1);
    assert_eq!(customers[0]["metadata[herald_project]"], p.id);
    assert!(customers[0]["email"].starts_with("owner-"));
    let sessions = stripe.posts_to("/v1/checkout/sessions");
    assert_eq!(sessions[0]["mode"], "subscription");
    assert_eq!(sessions[0]["customer"], "cus_1");
    assert_eq!(sessions[0]["client_reference_id"], p.id);
    assert_eq!(sessions[0]["line_items[0][price]"], "price_pro_monthly");
    assert_eq!(sessions[0]["success_url"], "https://app.example/paid");
    assert_eq!(
        sessions[0]["subscription_data[metadata][herald_plan]"],
        "pro"
    );
    // A second checkout finds the customer instead of making another.
    let r = checkout(&app, &p, json!({ "plan": "pro" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(stripe.posts_to("/v1/customers").len(), 1);

    // The portal and the invoices of that customer.
    let r = owner_call(
        &app,
        &p,
        Method::POST,
        "billing-portal",
        Some(json!({ "returnUrl": "https://app.example/billing" })),
    )
    .await;
    assert_eq!(r.body["url"], "https://billing.stripe.com/p/session/test_1");
    let portal = stripe.posts_to("/v1/billing_portal/sessions");
    assert_eq!(portal[0]["customer"], "cus_1");
    assert_eq!(portal[0]["return_url"], "https://app.example/billing");
    let r = owner_call(&app, &p, Method::GET, "billing-invoices", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"][0],
        json!({ "id": "in_2", "amount": 4900, "currency": "USD", "status": "open",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "url": "https://invoice.stripe.com/i/in_2" })
    );
    assert_eq!(r.body["data"][1]["url"], Value::Null);

    // A signed checkout.session.completed makes the project's plan `pro`.
    let completed = json!({
        "id": "evt_1", "object": "event", "type": "checkout.session.completed",
        "data": { "object": { "id": "cs_test_1", "object": "checkout.session",
            "client_reference_id": p.id, "customer": "cus_1", "subscription": "sub_1",
            "metadata": { "herald_project": p.id, "herald_plan": "pro" } } }
    })
    .to_string();
    let r = post_webhook(
        &app,
        &completed,
        Some(signature(WEBHOOK_SECRET, now(), &completed)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "received": 1, "applied": 1, "ignored": 0 }));
    let used = consumption(&app, &p).await;
    assert_eq!(used["billingEnabled"], true);
    assert_eq!(used["plan"], "pro");
    assert_eq!(used["subscriptionStatus"], "active");

    // Unsigned, wrongly signed, stale or altered calls change nothing.
    post_webhook(&app, &completed, None)
        .await
        .assert_error(401, "UNAUTHORIZED");
    post_webhook(
        &app,
        &completed,
        Some(signature("whsec_other", now(), &completed)),
    )
    .await
    .assert_error(401, "UNAUTHORIZED");
    post_webhook(
        &app,
        &completed,
        Some(signature(WEBHOOK_SECRET, now() - 600, &completed)),
    )
    .await
    .assert_error(401, "UNAUTHORIZED");
    let header = signature(WEBHOOK_SECRET, now(), &completed);
    post_webhook(&app, &completed.replace("pro", "max"), Some(header))
        .await
        .assert_error(401, "UNAUTHORIZED");

    // A cancelled subscription ends the plan; events about other projects or of other kinds
    // are ignored.
    let deleted = json!({
        "id": "evt_2", "object": "event", "type": "customer.subscription.deleted",
        "data": { "object": { "id": "sub_1", "object": "subscription", "status": "canceled",
            "metadata": { "herald_project": p.id, "herald_plan": "pro" } } }
    })
    .to_string();
    let r = post_webhook(
        &app,
        &deleted,
        Some(signature(WEBHOOK_SECRET, now(), &deleted)),
    )
    .await;
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    let used = consumption(&app, &p).await;
    assert_eq!(used["plan"], Value::Null);
    assert_eq!(used["subscriptionStatus"], "canceled");
    for (kind, project) in [
        ("customer.subscription.updated", "proj_unknown"),
        ("customer.created", p.id.as_str()),
    ] {
        let body = json!({ "id": "evt_3", "type": kind, "data": { "object": {
            "id": "sub_2", "status": "active", "metadata": { "herald_project": project } } } })
        .to_string();
        let r = post_webhook(&app, &body, Some(signature(WEBHOOK_SECRET, now(), &body))).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["applied"], 0, "{kind}: {}", r.body);
    }
}

#[tokio::test]
async fn stripe_without_a_reachable_api_fails_as_the_providers_fault() {
    let app = TestApp::spawn_with(|s| {
        s.plugins.billing = "stripe".into();
        // The default allowlist (`api.stripe.com`) does not include the configured base.
        s.plugins.settings.insert(
            "stripe".into(),
            [
                ("secret_key".to_string(), "sk_test_x".to_string()),
                ("api_base".to_string(), "http://127.0.0.1:9".to_string()),
                ("price_pro".to_string(), "price_1".to_string()),
            ]
            .into_iter()
            .collect(),
        );
    })
    .await;
    let p = app.project().await;
    let r = checkout(&app, &p, json!({ "plan": "pro" })).await;
    r.assert_error(502, "PLUGIN_ERROR");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allowlist"),
        "{}",
        r.body
    );
}
