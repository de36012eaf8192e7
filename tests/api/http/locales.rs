//! Templates per locale (#78): `variants` by BCP 47 tag, checked when saved, kept, replaced,
//! cleared and copied; picked for each contact's `data.locale` with its fallbacks (`fr-CA` to
//! `fr` to the template's own) by `/v1/send`, by a workflow's `SEND_EMAIL` step and by a
//! campaign's `localeVariants`, into the `outbox` transport's `.eml` files.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use herald::config::Settings;
use mail_parser::MessageParser;
use serde_json::{Value, json};

use crate::http::executions::{Step, workflow};
use crate::http::templates::{field_codes, pairs};
use crate::support::harness::{TestApp, TestProject};

/// Fast polling, unverified senders allowed (the `outbox` transport writes files).
fn fast(s: &mut Settings) {
    s.jobs_poll_interval_ms = 20;
    s.domains.allow_unverified = true;
}

fn variant(subject: &str, body: &str) -> Value {
    json!({ "subject": subject, "body": body })
}

/// A template in English with French, Brazilian Portuguese and traditional Chinese variants.
fn localized() -> Value {
    json!({
        "name": "Welcome",
        "subject": "Welcome {{firstName}}",
        "body": "<p>Hello</p>",
        "type": "TRANSACTIONAL",
        "from": "hello@acme.test",
        "variants": {
            "fr": variant("Bienvenue {{firstName}}", "<p>Bonjour</p>"),
            "pt-BR": variant("Bem-vindo {{firstName}}", "<p>Ola</p>"),
            "zh-Hant": variant("Huanying {{firstName}}", "<p>Ni hao</p>"),
        },
    })
}

async fn create(app: &TestApp, p: &TestProject, body: Value) -> String {
    let r = app.post("/templates", &p.secret_key, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

/// The tags of a template's `variants`.
fn tags(template: &Value) -> Vec<String> {
    template["variants"]
        .as_object()
        .unwrap_or_else(|| panic!("no variants in {template}"))
        .keys()
        .cloned()
        .collect()
}

/// The recipient and subject of each message in the outbox, but test sends.
fn subjects(app: &TestApp) -> (usize, BTreeMap<String, String>) {
    let messages = app.outbox_messages();
    let subjects = messages
        .iter()
        .map(|raw| {
            let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
            let to = m.to().unwrap().first().unwrap().address().unwrap();
            (to.to_string(), m.subject().unwrap().to_string())
        })
        .filter(|(_, s)| !s.starts_with("[Test]"))
        .collect();
    (messages.len(), subjects)
}

/// Waits until the outbox holds `n` messages, and answers the recipient and subject of each
/// one but test sends.
async fn delivered(app: &TestApp, n: usize) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (count, subjects) = subjects(app);
        if count >= n {
            return subjects;
        }
        assert!(
            Instant::now() < deadline,
            "only {count} of {n} messages delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn variants_are_checked_kept_replaced_cleared_and_copied() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let with_variants = |variants: Value| {
        let mut body = localized();
        body["variants"] = variants;
        body
    };

    // Each broken variant is named by its path; nothing is created.
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            with_variants(json!({
                "fr": variant("a\nb", ""),
                "x": variant("Hi", "<p>b</p>"),
            })),
        )
        .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("variants.fr.subject", "invalid"),
            ("variants.fr.body", "required"),
            ("variants.x", "invalid_locale"),
        ])
    );
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            with_variants(json!({ "de": variant("Hallo", "<p>{{#if vip}}ja</p>") })),
        )
        .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[("variants.de.body", "invalid_template")])
    );
    let message = r.body["error"]["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("line 1"), "{message}");
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            with_variants(json!({ "fr": variant("a", "b"), "FR": variant("c", "d") })),
        )
        .await;
    assert_eq!(field_codes(&r), pairs(&[("variants.fr", "duplicate")]));
    let many: serde_json::Map<String, Value> = (0..51)
        .map(|i| (format!("aa-{i}"), variant("s", "b")))
        .collect();
    let r = app
        .post(
            "/templates",
            &p.secret_key,
            with_variants(Value::Object(many)),
        )
        .await;
    assert_eq!(field_codes(&r), pairs(&[("variants", "too_many")]));
    let listed = app.get("/templates", &p.secret_key).await;
    assert_eq!(listed.body["total"], 0, "{}", listed.body);

    // Kept as written, answered in every read.
    let id = create(&app, &p, localized()).await;
    let t = app.get(&format!("/templates/{id}"), &p.secret_key).await;
    assert_eq!(tags(&t.body), ["fr", "pt-BR", "zh-Hant"]);
    assert_eq!(
        t.body["variants"]["fr"]["subject"],
        "Bienvenue {{firstName}}"
    );
    let listed = app.get("/templates", &p.secret_key).await;
    assert_eq!(tags(&listed.body["data"][0]), ["fr", "pt-BR", "zh-Hant"]);
    let mut plain = localized();
    plain.as_object_mut().unwrap().remove("variants");
    let plain = create(&app, &p, plain).await;
    let t = app.get(&format!("/templates/{plain}"), &p.secret_key).await;
    assert_eq!(t.body["variants"], json!({}));

    // A copy carries them.
    let r = app
        .post(
            &format!("/templates/{id}/duplicate"),
            &p.secret_key,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let copy = app
        .get(
            &format!("/templates/{}", r.body["id"].as_str().unwrap()),
            &p.secret_key,
        )
        .await;
    assert_eq!(tags(&copy.body), ["fr", "pt-BR", "zh-Hant"]);

    // A change replaces them all; a broken one changes nothing; null clears them; a change of
    // another field keeps them.
    let path = format!("/templates/{id}");
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "variants": { "de": variant("Willkommen", "<p>Hallo</p>") } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(tags(&r.body), ["de"]);
    let r = app
        .patch(
            &path,
            &p.secret_key,
            json!({ "variants": { "de": variant("", "<p>Hallo</p>") } }),
        )
        .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[("variants.de.subject", "required")])
    );
    let r = app
        .patch(&path, &p.secret_key, json!({ "name": "Renamed" }))
        .await;
    assert_eq!(tags(&r.body), ["de"]);
    let r = app
        .patch(&path, &p.secret_key, json!({ "variants": null }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["variants"], json!({}));
}

#[tokio::test]
async fn each_send_picks_the_contact_language_falling_back_subtag_by_subtag() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let tpl = create(&app, &p, localized()).await;
    // (address, data.locale, the subject it must get)
    let cases = [
        ("ca@example.com", json!("fr-CA"), "Bienvenue Ann"),
        ("upper@example.com", json!("FR"), "Bienvenue Ann"),
        ("br@example.com", json!("pt_br"), "Bem-vindo Ann"),
        ("pt@example.com", json!("pt-PT"), "Welcome Ann"),
        ("tw@example.com", json!("zh-Hant-TW"), "Huanying Ann"),
        ("zh@example.com", json!("zh"), "Welcome Ann"),
        ("de@example.com", json!("de"), "Welcome Ann"),
        ("bad@example.com", json!("not a tag"), "Welcome Ann"),
        ("number@example.com", json!(7), "Welcome Ann"),
        ("none@example.com", Value::Null, "Welcome Ann"),
    ];
    for (email, locale, _) in &cases {
        let data = if locale.is_null() {
            json!({})
        } else {
            json!({ "locale": locale })
        };
        p.contact(&app, email, data).await;
        let r = app
            .post(
                "/v1/send",
                &p.secret_key,
                json!({ "to": email, "template": tpl, "data": { "firstName": "Ann" } }),
            )
            .await;
        assert_eq!(r.status, 200, "{email}: {}", r.body);
    }
    // A send's own subject wins over the template's, and with it its languages.
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "own@example.com", "template": tpl, "subject": "Own subject",
                    "data": { "locale": "fr" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let got = delivered(&app, cases.len() + 1).await;
    for (email, locale, subject) in &cases {
        assert_eq!(got[*email], *subject, "{email} in {locale}");
    }
    assert_eq!(got["own@example.com"], "Own subject");
}

#[tokio::test]
async fn a_workflow_send_step_picks_the_contact_language() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let tpl = create(&app, &p, localized()).await;
    workflow(
        &app,
        &p,
        "signup",
        vec![Step("SEND_EMAIL", json!({ "templateId": tpl }))],
        &[],
        json!({}),
    )
    .await;
    for (email, locale) in [
        ("marie@example.com", "fr-CA"),
        ("john@example.com", "en-GB"),
    ] {
        let r = app
            .post(
                "/v1/track",
                &p.secret_key,
                json!({ "email": email, "event": "signup",
                        "data": { "locale": locale, "firstName": "Lou" } }),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let got = delivered(&app, 2).await;
    assert_eq!(got["marie@example.com"], "Bienvenue Lou");
    assert_eq!(got["john@example.com"], "Welcome Lou");
}

#[tokio::test]
async fn a_campaign_sends_each_recipient_its_language_tests_included() {
    let app = TestApp::spawn_with(fast).await;
    let p = app.project().await;
    let mut campaign = json!({
        "name": "News",
        "subject": "News for {{firstName}}",
        "body": "<p>Read on</p>",
        "from": "news@acme.test",
        "audienceType": "ALL",
        "localeVariants": {
            "fr": variant("Nouvelles pour {{firstName}}", "<p>Lisez</p>"),
            "x": variant("", "<p>{{#if a}}</p>"),
        },
    });
    let r = app
        .post("/campaigns", &p.secret_key, campaign.clone())
        .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[("localeVariants.x", "invalid_locale")])
    );
    campaign["localeVariants"]
        .as_object_mut()
        .unwrap()
        .remove("x");
    campaign["localeVariants"]["de"] = variant("Nachrichten", "<p>{{#if a}}</p>");
    let r = app
        .post("/campaigns", &p.secret_key, campaign.clone())
        .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[("localeVariants.de.body", "invalid_template")])
    );
    campaign["localeVariants"]["de"] = variant("Nachrichten fur {{firstName}}", "<p>Lesen</p>");
    // An A/B test compares contents, so it cannot be one in several languages as well.
    let mut tested = campaign.clone();
    tested["variants"] = json!([variant("A", "<p>a</p>"), variant("B", "<p>b</p>")]);
    tested["testFraction"] = json!(0.2);
    tested["winnerMetric"] = json!("OPEN_RATE");
    tested["testDuration"] = json!(3600);
    let r = app.post("/campaigns", &p.secret_key, tested).await;
    assert_eq!(field_codes(&r), pairs(&[("localeVariants", "conflict")]));
    let r = app.post("/campaigns", &p.secret_key, campaign).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["data"]["id"].as_str().unwrap().to_string();
    let read = app.get(&format!("/campaigns/{id}"), &p.secret_key).await;
    assert_eq!(
        read.body["localeVariants"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["de", "fr"]
    );

    for (email, locale) in [
        ("ann@example.com", "fr-BE"),
        ("bob@example.com", "de-AT"),
        ("cy@example.com", "es"),
    ] {
        p.contact(&app, email, json!({ "locale": locale, "firstName": "Pat" }))
            .await;
    }
    let r = app
        .post(
            &format!("/campaigns/{id}/test"),
            &p.secret_key,
            json!({ "email": "ann@example.com" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    delivered(&app, 1).await;
    let raw = app.outbox_messages().pop().unwrap();
    let test = MessageParser::default().parse(raw.as_bytes()).unwrap();
    assert_eq!(test.subject(), Some("[Test] Nouvelles pour Pat"));

    let r = app
        .post(&format!("/campaigns/{id}/send"), &p.secret_key, json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let subjects = delivered(&app, 4).await;
    assert_eq!(subjects["ann@example.com"], "Nouvelles pour Pat");
    assert_eq!(subjects["bob@example.com"], "Nachrichten fur Pat");
    assert_eq!(subjects["cy@example.com"], "News for Pat");
}
