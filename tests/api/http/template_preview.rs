//! `POST /templates/:id/preview`: a template rendered for a contact as a send renders it (its
//! data, the variant its `data.locale` picks with the fallbacks, its signed links), unsaved
//! subject, body and variants previewed and checked as on save (422 with field paths), an
//! address that is no contact yet, why a send would not deliver, nothing written, and 404 for
//! another project's template or contact.

use serde_json::{Value, json};

use crate::http::templates::{field_codes, pairs};
use crate::support::harness::{Reply, TestApp, TestProject};

async fn create(app: &TestApp, p: &TestProject, body: Value) -> String {
    let r = app.post("/templates", &p.secret_key, body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

async fn preview(app: &TestApp, p: &TestProject, template: &str, body: Value) -> Reply {
    app.post(
        &format!("/templates/{template}/preview"),
        &p.secret_key,
        body,
    )
    .await
}

/// A template in English with a French variant, using data and the built-in links.
fn localized(kind: &str) -> Value {
    json!({
        "name": "Welcome",
        "type": kind,
        "subject": "Welcome {{firstName ?? \"friend\"}}",
        "body": "<p>Hello {{firstName}}, plan {{plan}}</p>\
                 <a href=\"{{unsubscribeUrl}}\">Leave</a> <a href=\"{{manageUrl}}\">Choose</a> \
                 <a href=\"{{viewInBrowserUrl}}\">Web</a> <a href=\"https://example.com/x\">Site</a>",
        "variants": {
            "fr": { "subject": "Bienvenue {{firstName}}", "body": "<p>Bonjour {{firstName}}</p>" },
        },
    })
}

async fn contacts_total(app: &TestApp, p: &TestProject) -> i64 {
    let r = app.get("/contacts", &p.secret_key).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["total"].as_i64().unwrap()
}

#[tokio::test]
async fn a_contact_gets_its_data_its_links_and_the_variant_of_its_locale() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let tpl = create(&app, &p, localized("TRANSACTIONAL")).await;
    let ada = p
        .contact(
            &app,
            "ada@example.com",
            json!({ "firstName": "Ada", "plan": "pro" }),
        )
        .await;
    let marie = p
        .contact(
            &app,
            "marie@example.com",
            json!({ "firstName": "Marie", "locale": "fr-CA" }),
        )
        .await;
    let before = app
        .get(&format!("/contacts/{ada}"), &p.secret_key)
        .await
        .body;

    let r = preview(&app, &p, &tpl, json!({ "contactId": ada })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["subject"], "Welcome Ada");
    let html = r.body["html"].as_str().unwrap();
    assert!(html.contains("<p>Hello Ada, plan pro</p>"), "{html}");
    for page in ["/unsubscribe/", "/manage/", "/view/"] {
        assert!(html.contains(page), "no {page} link in {html}");
    }
    // The links are as written: no click tracking, no open pixel.
    assert!(html.contains("href=\"https://example.com/x\""), "{html}");
    assert!(!html.contains("/t/"), "{html}");
    assert!(
        r.body["text"].as_str().unwrap().contains("Hello Ada"),
        "{}",
        r.body
    );
    assert_eq!(r.body["locale"], Value::Null);
    assert_eq!(r.body["contactId"], ada.as_str());
    assert_eq!(r.body["email"], "ada@example.com");
    assert_eq!(r.body["notSentReason"], Value::Null);

    // The unsubscribe link is the contact's own signed page.
    let unsubscribe = html
        .split("href=\"")
        .find(|s| s.contains("/unsubscribe/"))
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_string();
    let page = reqwest::get(&unsubscribe).await.unwrap();
    assert_eq!(page.status(), 200, "{unsubscribe}");

    // fr-CA falls back to fr; by address as well as by id.
    let r = preview(&app, &p, &tpl, json!({ "email": "Marie@Example.com" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["subject"], "Bienvenue Marie");
    assert_eq!(r.body["locale"], "fr");
    assert_eq!(r.body["contactId"], marie.as_str());

    // `locale` stands in for the contact's, as a send's one-off data.locale does.
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({ "contactId": marie, "locale": "de" }),
    )
    .await;
    assert_eq!(
        (r.body["subject"].as_str(), &r.body["locale"]),
        (Some("Welcome Marie"), &Value::Null)
    );
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({ "contactId": ada, "locale": "fr-FR" }),
    )
    .await;
    assert_eq!(
        (r.body["subject"].as_str(), r.body["locale"].as_str()),
        (Some("Bienvenue Ada"), Some("fr"))
    );

    // Nothing was written: the contact is as it was, and no email exists.
    let after = app
        .get(&format!("/contacts/{ada}"), &p.secret_key)
        .await
        .body;
    assert_eq!(before, after);
    let activity = app.get("/activity", &p.secret_key).await;
    assert_eq!(activity.status, 200, "{}", activity.body);
    assert!(
        !activity.body.to_string().contains("eml_"),
        "{}",
        activity.body
    );
}

#[tokio::test]
async fn an_unsaved_draft_is_previewed_and_checked_as_on_save() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let tpl = create(&app, &p, localized("TRANSACTIONAL")).await;
    let ada = p
        .contact(
            &app,
            "ada@example.com",
            json!({ "firstName": "Ada", "locale": "pt-BR" }),
        )
        .await;

    let draft = json!({
        "contactId": ada,
        "subject": "Draft {{firstName}}",
        "body": "<p>New body</p>",
        "variants": { "pt-BR": { "subject": "Ola {{firstName}}", "body": "<p>Ola</p>" } },
    });
    let r = preview(&app, &p, &tpl, draft).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.body["subject"].as_str(), r.body["locale"].as_str()),
        (Some("Ola Ada"), Some("pt-BR"))
    );
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({ "contactId": ada, "subject": "Draft {{firstName}}", "variants": {} }),
    )
    .await;
    assert_eq!(r.body["subject"], "Draft Ada", "{}", r.body);
    assert!(
        r.body["html"].as_str().unwrap().contains("Hello Ada"),
        "{}",
        r.body
    );
    // The saved template is unchanged.
    let saved = app
        .get(&format!("/templates/{tpl}"), &p.secret_key)
        .await
        .body;
    assert_eq!(saved["subject"], localized("TRANSACTIONAL")["subject"]);

    // Broken drafts: every field with its path, as a save answers them.
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({
            "contactId": ada,
            "subject": "Hi {{#if x}}",
            "body": "<p>{{firstName</p>",
            "variants": { "fr": { "subject": "Salut", "body": "<p>{{/each}}</p>" }, "x": { "subject": "a", "body": "b" } },
        }),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        field_codes(&r),
        pairs(&[
            ("subject", "invalid_template"),
            ("body", "invalid_template"),
            ("variants.x", "invalid_locale"),
        ])
    );
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({ "contactId": ada, "variants": { "fr": { "subject": "Salut", "body": "<p>{{/each}}</p>" } } }),
    )
    .await;
    assert_eq!(
        field_codes(&r),
        pairs(&[("variants.fr.body", "invalid_template")]),
        "{}",
        r.body
    );
    assert!(
        r.body["error"]["errors"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 1"),
        "{}",
        r.body
    );

    // Who to preview for, and the language tag.
    for (body, expected) in [
        (json!({}), ("contactId", "required")),
        (
            json!({ "contactId": ada, "email": "a@example.com" }),
            ("email", "invalid"),
        ),
        (
            json!({ "email": "not an address" }),
            ("email", "invalid_email"),
        ),
        (
            json!({ "contactId": ada, "locale": "not a tag" }),
            ("locale", "invalid_locale"),
        ),
    ] {
        let r = preview(&app, &p, &tpl, body.clone()).await;
        assert_eq!(r.status, 422, "{body}: {}", r.body);
        assert_eq!(field_codes(&r), pairs(&[expected]), "{body}");
    }
}

#[tokio::test]
async fn an_address_that_is_no_contact_is_previewed_as_a_send_would_create_it() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let marketing = create(&app, &p, localized("MARKETING")).await;
    let transactional = create(&app, &p, localized("TRANSACTIONAL")).await;
    let ada = p
        .contact(&app, "ada@example.com", json!({ "firstName": "Ada" }))
        .await;
    let total = contacts_total(&app, &p).await;

    let r = preview(
        &app,
        &p,
        &transactional,
        json!({ "email": "new@example.com" }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["contactId"], Value::Null);
    assert_eq!(r.body["email"], "new@example.com");
    assert_eq!(r.body["subject"], "Welcome friend");
    assert_eq!(r.body["notSentReason"], Value::Null);
    // A send creates it unsubscribed: marketing mail to it would not be delivered.
    let r = preview(&app, &p, &marketing, json!({ "email": "new@example.com" })).await;
    assert!(
        r.body["notSentReason"]
            .as_str()
            .unwrap()
            .contains("unsubscribed"),
        "{}",
        r.body
    );
    assert_eq!(
        contacts_total(&app, &p).await,
        total,
        "the preview created a contact"
    );

    // Marketing mail to a subscribed contact is delivered; to one who left, not.
    let r = preview(&app, &p, &marketing, json!({ "contactId": ada })).await;
    assert_eq!(r.body["notSentReason"], Value::Null, "{}", r.body);
    let r = app
        .patch(
            &format!("/contacts/{ada}"),
            &p.secret_key,
            json!({ "subscribed": false }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = preview(&app, &p, &marketing, json!({ "contactId": ada })).await;
    assert!(
        r.body["notSentReason"]
            .as_str()
            .unwrap()
            .contains("unsubscribed"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn another_projects_template_or_contact_is_not_found() {
    let app = TestApp::spawn().await;
    let (p, other) = (app.project().await, app.project().await);
    let tpl = create(&app, &p, localized("TRANSACTIONAL")).await;
    let theirs_tpl = create(&app, &other, localized("TRANSACTIONAL")).await;
    let theirs = other
        .contact(&app, "eve@example.com", json!({ "firstName": "Eve" }))
        .await;
    let mine = p.contact(&app, "ada@example.com", json!({})).await;

    let r = preview(&app, &p, &tpl, json!({ "contactId": theirs })).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "NOT_FOUND");
    let r = preview(&app, &p, &theirs_tpl, json!({ "contactId": mine })).await;
    assert_eq!(r.status, 404, "{}", r.body);
    for id in ["tpl_0123456789abcdef0123456789abcdef", "nope"] {
        let r = preview(&app, &p, id, json!({ "contactId": mine })).await;
        assert_eq!(r.status, 404, "{id}: {}", r.body);
    }
    let r = preview(
        &app,
        &p,
        &tpl,
        json!({ "contactId": "cnt_0123456789abcdef0123456789abcdef" }),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Eve's address in this project is no contact here: her data is not read.
    let r = preview(&app, &p, &tpl, json!({ "email": "eve@example.com" })).await;
    assert_eq!(
        (r.body["subject"].as_str(), &r.body["contactId"]),
        (Some("Welcome friend"), &Value::Null)
    );
    // The public key cannot preview.
    let r = app
        .post(
            &format!("/templates/{tpl}/preview"),
            &p.public_key,
            json!({ "contactId": mine }),
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
}
