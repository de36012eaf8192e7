//! "View in browser" through HTTP, with the `outbox` transport: `{{viewInBrowserUrl}}` renders
//! to a signed page that shows the email as its contact received it, with its tracked links
//! working and without recording an open; an email without the link keeps no body after
//! delivery; the page is a 404 for a bad token and once the body is no longer kept.

use reqwest::Method;
use serde_json::json;

use crate::http::double_opt_in::link;
use crate::http::engagement::html_of;
use crate::http::send::{count, email_with_status};
use crate::support::harness::TestApp;

#[tokio::test]
async fn the_page_shows_the_contacts_email_without_an_open() {
    let app = TestApp::spawn_with(|s| {
        s.jobs_poll_interval_ms = 20;
        s.domains.allow_unverified = true;
    })
    .await;
    let p = app.project().await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": ["ann@example.com", "bob@example.com"],
                "from": "news@acme.test",
                "subject": "News",
                "body": "<html><body><p>Hello {{name ?? \"friend\"}}</p>\
                         <a href=\"{{viewInBrowserUrl}}\">View in browser</a> \
                         <a href=\"https://shop.example/sale\">Sale</a></body></html>",
                "data": { "name": "Ann" }
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let email = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    let other = r.body["data"]["emails"][1]["email"]
        .as_str()
        .unwrap()
        .to_string();
    email_with_status(&app, &p, &email, "sent").await;
    email_with_status(&app, &p, &other, "sent").await;
    let plain = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({ "to": "cat@example.com", "from": "news@acme.test", "subject": "Plain",
                    "body": "<p>No view link</p>" }),
        )
        .await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let plain = plain.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    email_with_status(&app, &p, &plain, "sent").await;

    // Each recipient's message links to its own page.
    let messages = app.outbox_messages();
    let received = messages
        .iter()
        .find(|m| m.contains("To: ann@example.com"))
        .expect("ann's message");
    let url = link(&html_of(received), "/view/");
    let bobs = messages
        .iter()
        .find(|m| m.contains("To: bob@example.com"))
        .expect("bob's message");
    assert_ne!(url, link(&html_of(bobs), "/view/"));

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"),
        "{headers:?}"
    );
    assert_eq!(headers["cache-control"], "private, no-store");
    let page = r.text().await.unwrap();
    assert!(page.contains("Hello Ann"), "{page}");
    assert!(
        !page.contains("/t/o/"),
        "the page carries no open pixel: {page}"
    );
    // Its tracked link still leads to the shop, and counts as a click.
    let click = link(&page, "/t/c/");
    let r = client.get(&click).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://shop.example/sale");
    let e = app.get(&format!("/emails/{email}"), &p.secret_key).await;
    assert_eq!(e.body["opens"], 0, "{}", e.body);

    // Only the emails that link to the page keep their body after delivery.
    let kept = count(&app, "SELECT COUNT(*) FROM emails WHERE draft IS NOT NULL").await;
    assert_eq!(kept, 2);
    let not_kept = app.state().links().view_url(&plain);
    let r = client.get(&not_kept).send().await.unwrap();
    assert_eq!(r.status(), 404);

    // A bad token is a 404 page.
    for bad in ["/view/nope", "/view/YWJj.AAAAAAAAAAAAAAAAAAAAAA"] {
        let r = app.call(Method::GET, bad, None, None).await;
        assert_eq!(r.status, 404, "{bad}");
    }
    // Past the retention, the body goes and the page is a 404.
    let pruned = app
        .state()
        .store()
        .prune_kept_drafts(herald::domain::time::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 404);
}
