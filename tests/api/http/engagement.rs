//! What happens after a send: the signed unsubscribe, subscribe and preferences links, the open
//! pixel and click redirects, delivery notifications (a bounce unsubscribes the contact), and the
//! activity feed.

use herald::config::Settings;
use mail_parser::MessageParser;
use reqwest::Method;
use serde_json::{Value, json};

use crate::http::domains::{verified_domain, with_dns};
use crate::support::dnsd::DnsServer;
use crate::support::harness::{TestApp, TestProject, read};
use crate::support::smtpd::SmtpServer;

const SECRET: &str = "notify-secret-1";

struct Sent {
    app: TestApp,
    p: TestProject,
    smtp: SmtpServer,
    _dns: DnsServer,
    email_id: String,
    contact_id: String,
    html: String,
}

/// Sends one email with a link and an unsubscribe link to ann@example.com and returns what
/// arrived.
async fn sent(adjust: impl FnOnce(&mut Settings)) -> Sent {
    let dns = DnsServer::start().await;
    let smtp = SmtpServer::start().await;
    let app = TestApp::spawn_with(|s| {
        with_dns(&dns)(s);
        s.plugins.transport = "smtp".into();
        s.plugins.smtp_host = Some("127.0.0.1".into());
        s.plugins.smtp_port = smtp.addr.port();
        s.plugins.smtp_tls = herald::plugins::SmtpTls::None;
        s.plugins.notify_secret = Some(SECRET.into());
        s.jobs_poll_interval_ms = 50;
        adjust(s);
    })
    .await;
    let p = app.project().await;
    verified_domain(&app, &p, &dns, "acme.test").await;
    p.contact(&app, "ann@example.com", json!({})).await;
    let r = app
        .post(
            "/v1/send",
            &p.secret_key,
            json!({
                "to": "ann@example.com",
                "from": "hello@acme.test",
                "subject": "News",
                "body": "<p><a href=\"https://shop.example/sale?a=1&amp;b=2\">Sale</a> \
                         <a href=\"{{unsubscribeUrl}}\">Unsubscribe</a> <a href=\"{{manageUrl}}\">Preferences</a></p>"
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let email_id = r.body["data"]["emails"][0]["email"]
        .as_str()
        .unwrap()
        .to_string();
    let contact_id = r.body["data"]["emails"][0]["contact"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let html = html_of(&smtp.received(1).await.data[0]);
    // The relay has it; the outcome is committed right after.
    crate::http::send::email_with_status(&app, &p, &email_id, "sent").await;
    Sent {
        app,
        p,
        smtp,
        _dns: dns,
        email_id,
        contact_id,
        html,
    }
}

/// The HTML part of a received message.
pub fn html_of(raw: &str) -> String {
    MessageParser::default()
        .parse(raw.as_bytes())
        .unwrap()
        .body_html(0)
        .unwrap()
        .into_owned()
}

/// The `href`s of the HTML, in order.
fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .collect()
}

fn img_src(html: &str) -> String {
    html.split("<img src=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string()
}

/// A client that does not follow redirects.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn contact(app: &TestApp, p: &TestProject, id: &str) -> Value {
    app.get(&format!("/contacts/{id}"), &p.secret_key)
        .await
        .body
}

async fn history(app: &TestApp, p: &TestProject, id: &str) -> Vec<String> {
    let r = app.get(&format!("/emails/{id}"), &p.secret_key).await;
    r.body["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn unsubscribe_links_work_without_javascript_and_in_one_click() {
    let s = sent(|_| {}).await;
    let links = hrefs(&s.html);
    let unsubscribe = links
        .iter()
        .find(|l| l.contains("/unsubscribe/"))
        .expect("the unsubscribe link")
        .clone();
    let manage = links
        .iter()
        .find(|l| l.contains("/manage/"))
        .expect("the preferences link")
        .clone();
    let client = no_redirects();

    // Opening the page changes nothing (link scanners open links); it shows a form.
    let page = client.get(&unsubscribe).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let body = page.text().await.unwrap();
    assert!(body.contains("ann@example.com"), "{body}");
    assert!(body.contains("<form method=\"post\""), "{body}");
    assert!(!body.contains("<script"));
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );

    // The one-click POST of RFC 8058 unsubscribes, with the event's source `link`.
    let r = client
        .post(&unsubscribe)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        false
    );
    let events = s
        .app
        .get("/events?name=contact.unsubscribed", &s.p.secret_key)
        .await;
    assert_eq!(events.body["data"][0]["data"]["source"], "link");

    // The preferences page shows the state (the global unsubscribe checked); saving its form
    // with the box unchecked subscribes again.
    let body = client
        .get(&manage)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("You are unsubscribed"), "{body}");
    assert!(
        body.contains("name=\"unsubscribeAll\" value=\"on\" checked"),
        "{body}"
    );
    let action = body
        .split("action=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    assert_eq!(action, manage);
    let r = client
        .post(&action)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("You are subscribed"));
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );

    // A forged or altered token is refused, and changes nothing.
    let forged = unsubscribe.replace("/unsubscribe/", "/unsubscribe/x");
    let r = client.post(&forged).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let (prefix, token) = unsubscribe.rsplit_once('/').unwrap();
    let (payload, tag) = token.split_once('.').unwrap();
    let mut other = payload.to_string();
    other.push('A');
    let r = client
        .post(format!("{prefix}/{other}.{tag}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );
}

#[tokio::test]
async fn opens_and_clicks_are_recorded_and_redirects_only_lead_to_the_emails_links() {
    let s = sent(|_| {}).await;
    let client = no_redirects();
    // The tracked link redirects to the original, and is recorded.
    let tracked = hrefs(&s.html)
        .into_iter()
        .find(|l| l.contains("/t/c/"))
        .expect("a tracked link");
    let r = client.get(&tracked).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://shop.example/sale?a=1&b=2");
    // The pixel is a GIF and never cached.
    let pixel = img_src(&s.html);
    assert!(pixel.contains("/t/o/"));
    let r = client.get(&pixel).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/gif");
    assert!(
        r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    assert!(r.bytes().await.unwrap().starts_with(b"GIF89a"));

    let email = s
        .app
        .get(&format!("/emails/{}", s.email_id), &s.p.secret_key)
        .await;
    assert_eq!(email.body["status"], "clicked", "{}", email.body);
    let kinds = history(&s.app, &s.p, &s.email_id).await;
    assert_eq!(kinds, ["queued", "sent", "clicked", "opened"]);
    let click = &email.body["history"][2];
    assert_eq!(click["detail"], "https://shop.example/sale?a=1&b=2");
    // Later opens and clicks are counted, not stored one row each.
    for _ in 0..5 {
        assert_eq!(client.get(&pixel).send().await.unwrap().status(), 200);
    }
    for _ in 0..3 {
        assert_eq!(client.get(&tracked).send().await.unwrap().status(), 302);
    }
    counts_reach(&s.app, &s.p, &s.email_id, 6, 4).await;
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await,
        ["queued", "sent", "clicked", "opened"]
    );
    // Rates count distinct emails: one email opened six times is one open in one send.
    let stats = s.app.get("/activity/stats?days=7", &s.p.secret_key).await;
    assert_eq!(stats.body["openRate"], 1.0, "{}", stats.body);
    assert_eq!(stats.body["clickRate"], 1.0, "{}", stats.body);
    assert_eq!(stats.body["bounceRate"], 0.0, "{}", stats.body);

    // Tokens cannot be made to lead elsewhere: an index that was not in the email, or an
    // altered token, is 404.
    let (prefix, _) = tracked.rsplit_once('/').unwrap();
    let r = client
        .get(format!("{prefix}/bm90LWEtdG9rZW4.AAAAAAAAAAAAAAAAAAAAAA"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // A project that switched tracking off gets neither pixel nor redirects.
    let quiet = sent(|_| {}).await;
    let r = quiet
        .app
        .call_with(
            &quiet.p.owner,
            Method::PATCH,
            &format!("/users/@me/projects/{}", quiet.p.id),
            None,
            Some(json!({ "trackOpens": false, "trackClicks": false })),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["trackOpens"], false);
    let r = quiet
        .app
        .post(
            "/v1/send",
            &quiet.p.secret_key,
            json!({ "to": "ann@example.com", "from": "hello@acme.test", "subject": "s",
                    "body": "<a href=\"https://shop.example/\">x</a>" }),
        )
        .await;
    assert_eq!(r.status, 200);
    let html = html_of(&quiet.smtp.received(2).await.data[1]);
    assert!(html.contains("href=\"https://shop.example/\""), "{html}");
    assert!(!html.contains("/t/o/"), "{html}");
}

/// Polls the email until its `opens` and `clicks` are `opens` and `clicks` (later hits are
/// written in batches about every second); panics after 10 s.
async fn counts_reach(app: &TestApp, p: &TestProject, email_id: &str, opens: i64, clicks: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let email = app.get(&format!("/emails/{email_id}"), &p.secret_key).await;
        assert_eq!(email.status, 200, "{}", email.body);
        let (o, c) = (email.body["opens"].as_i64(), email.body["clicks"].as_i64());
        if (o, c) == (Some(opens), Some(clicks)) {
            return;
        }
        assert!(
            o <= Some(opens) && c <= Some(clicks),
            "counted more than {opens} opens and {clicks} clicks: {}",
            email.body
        );
        assert!(
            std::time::Instant::now() < deadline,
            "opens {opens} and clicks {clicks} not reached in 10 s: {}",
            email.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The activity feed's entries of one kind for an email.
async fn feed_of(app: &TestApp, p: &TestProject, kind: &str) -> usize {
    let r = app
        .get(&format!("/activity?type={kind}&limit=100"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"].as_array().unwrap().len()
}

#[tokio::test]
async fn later_opens_and_clicks_are_counted_in_batches_and_add_up_across_instances() {
    let s = sent(|_| {}).await;
    let client = no_redirects();
    let pixel = img_src(&s.html);
    let tracked = hrefs(&s.html)
        .into_iter()
        .find(|l| l.contains("/t/c/"))
        .expect("a tracked link");

    // The first open and the first click are recorded before they are answered, as always:
    // the history entry, the status, the feed, the rates.
    assert_eq!(client.get(&pixel).send().await.unwrap().status(), 200);
    let email = s
        .app
        .get(&format!("/emails/{}", s.email_id), &s.p.secret_key)
        .await;
    assert_eq!(email.body["status"], "opened", "{}", email.body);
    assert_eq!(email.body["opens"], 1, "{}", email.body);
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await,
        ["queued", "sent", "opened"]
    );
    assert_eq!(feed_of(&s.app, &s.p, "opened").await, 1);
    let r = client.get(&tracked).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://shop.example/sale?a=1&b=2");
    let email = s
        .app
        .get(&format!("/emails/{}", s.email_id), &s.p.secret_key)
        .await;
    assert_eq!(email.body["status"], "clicked", "{}", email.body);
    assert_eq!(email.body["clicks"], 1, "{}", email.body);
    assert_eq!(feed_of(&s.app, &s.p, "clicked").await, 1);

    // 50 more of each, at once: answered as before, no further history or feed entries, and
    // the counts reach their totals after the flush.
    let hits: Vec<_> = (0..50)
        .flat_map(|_| [pixel.clone(), tracked.clone()])
        .map(|url| {
            let client = client.clone();
            tokio::spawn(async move { client.get(&url).send().await.unwrap().status().as_u16() })
        })
        .collect();
    for (i, hit) in hits.into_iter().enumerate() {
        assert_eq!(hit.await.unwrap(), if i % 2 == 0 { 200 } else { 302 });
    }
    counts_reach(&s.app, &s.p, &s.email_id, 51, 51).await;
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await,
        ["queued", "sent", "opened", "clicked"]
    );
    assert_eq!(feed_of(&s.app, &s.p, "opened").await, 1);
    assert_eq!(feed_of(&s.app, &s.p, "clicked").await, 1);
    let stats = s.app.get("/activity/stats?days=7", &s.p.secret_key).await;
    assert_eq!(stats.body["openRate"], 1.0, "{}", stats.body);
    assert_eq!(stats.body["clickRate"], 1.0, "{}", stats.body);

    // Another instance on the same database adds its own counts to the same email (the write
    // adds, it never overwrites), and writes what it counted when it stops.
    let other = s.app.spawn_sharing(|_| {}).await;
    let elsewhere = |url: &str| url.replacen(s.app.base_url(), other.base_url(), 1);
    for _ in 0..7 {
        assert_eq!(client.get(&pixel).send().await.unwrap().status(), 200);
    }
    counts_reach(&s.app, &s.p, &s.email_id, 58, 51).await;
    for _ in 0..7 {
        let r = client.get(elsewhere(&pixel)).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    for _ in 0..3 {
        let r = client.get(elsewhere(&tracked)).send().await.unwrap();
        assert_eq!(r.status(), 302);
    }
    other.stop().await;
    let email = s
        .app
        .get(&format!("/emails/{}", s.email_id), &s.p.secret_key)
        .await;
    assert_eq!(
        (&email.body["opens"], &email.body["clicks"]),
        (&json!(65), &json!(54)),
        "{}",
        email.body
    );
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await,
        ["queued", "sent", "opened", "clicked"]
    );
}

/// A delivery status notification (RFC 3464) about `email_id`, as a relay returns it.
fn dsn(email_id: &str, action: &str, status: &str) -> String {
    format!(
        "From: MAILER-DAEMON@mx.example.com\r\nContent-Type: multipart/report; report-type=delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.example.com\r\n\r\nFinal-Recipient: rfc822; ann@example.com\r\nAction: {action}\r\n\
         Status: {status}\r\nDiagnostic-Code: smtp; 550 5.1.1 mailbox unknown\r\n\r\n\
         Message-ID: <{email_id}@acme.test>\r\nX-Herald-Message-Id: <{email_id}@acme.test>\r\n\r\n"
    )
}

async fn notify(
    app: &TestApp,
    secret: Option<&str>,
    body: String,
) -> crate::support::harness::Reply {
    let mut req = app
        .client
        .post(app.url("/webhooks/notify"))
        .header("content-type", "message/rfc822")
        .body(body);
    if let Some(secret) = secret {
        req = req.header("x-herald-secret", secret);
    }
    read(req.send().await.unwrap()).await
}

#[tokio::test]
async fn a_hard_bounce_marks_the_email_and_unsubscribes_the_contact() {
    let s = sent(|_| {}).await;
    // Without the secret, or with a wrong one: refused, nothing changes.
    for secret in [None, Some("wrong")] {
        let r = notify(&s.app, secret, dsn(&s.email_id, "failed", "5.1.1")).await;
        r.assert_error(401, "UNAUTHORIZED");
    }
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await.last().unwrap(),
        "sent"
    );

    // A bounce report naming another recipient (a message id quoted in someone else's mail)
    // applies to nothing.
    let forged = dsn(&s.email_id, "failed", "5.1.1")
        .replace("rfc822; ann@example.com", "rfc822; mallory@example.com");
    let r = notify(&s.app, Some(SECRET), forged).await;
    assert_eq!(r.body, json!({ "received": 1, "applied": 0, "ignored": 1 }));
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );

    // A delivery, then a hard bounce.
    let r = notify(&s.app, Some(SECRET), dsn(&s.email_id, "delivered", "2.0.0")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["applied"], 1);
    let r = notify(&s.app, Some(SECRET), dsn(&s.email_id, "failed", "5.1.1")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({ "received": 1, "applied": 1, "ignored": 0 }));
    let email = s
        .app
        .get(&format!("/emails/{}", s.email_id), &s.p.secret_key)
        .await;
    assert_eq!(email.body["status"], "bounced");
    assert_eq!(
        history(&s.app, &s.p, &s.email_id).await,
        ["queued", "sent", "delivered", "bounced"]
    );
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        false
    );
    let events = s
        .app
        .get("/events?name=contact.unsubscribed", &s.p.secret_key)
        .await;
    let data = &events.body["data"][0]["data"];
    assert_eq!(data["source"], "bounce");
    assert!(
        data["reason"].as_str().unwrap().contains("mailbox unknown"),
        "{data}"
    );

    // A notification about a message that is not ours is counted and ignored.
    let r = notify(
        &s.app,
        Some(SECRET),
        dsn("eml_00000000000000000000000000000000", "failed", "5.1.1"),
    )
    .await;
    assert_eq!(r.body["ignored"], 1);

    // The feed shows what happened, newest first, and its counts.
    let feed = s.app.get("/activity", &s.p.secret_key).await;
    assert_eq!(feed.status, 200, "{}", feed.body);
    let kinds: Vec<&str> = feed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["bounced", "delivered", "sent"]);
    assert_eq!(feed.body["data"][0]["email"], "ann@example.com");
    assert_eq!(feed.body["data"][0]["subject"], "News");
    assert_eq!(feed.body["total"], 3);
    let bounced = s
        .app
        .get("/activity?type=bounced&limit=1", &s.p.secret_key)
        .await;
    assert_eq!(bounced.body["data"].as_array().unwrap().len(), 1);
    s.app
        .get("/activity?type=nonsense", &s.p.secret_key)
        .await
        .assert_error(400, "BAD_REQUEST");
    let types = s.app.get("/activity/types", &s.p.secret_key).await;
    assert_eq!(types.body["types"], json!(["bounced", "delivered", "sent"]));
    let stats = s.app.get("/activity/stats?days=7", &s.p.secret_key).await;
    assert_eq!(stats.body["totals"]["sent"], 1);
    assert_eq!(stats.body["bounceRate"], 1.0);
    assert_eq!(stats.body["daily"].as_array().unwrap().len(), 1);
    let recent = s.app.get("/activity/recent-count", &s.p.secret_key).await;
    assert_eq!(recent.body["count"], 3);
    let upcoming = s.app.get("/activity/upcoming", &s.p.secret_key).await;
    assert_eq!(upcoming.body["queuedEmails"], 0);

    // Another project sees none of it.
    let q = s.app.project().await;
    let other = s.app.get("/activity", &q.secret_key).await;
    assert_eq!(other.body["total"], 0);
    s.app
        .get(&format!("/emails/{}", s.email_id), &q.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn notifications_are_refused_until_a_secret_is_configured() {
    let s = sent(|settings| settings.plugins.notify_secret = None).await;
    let r = notify(&s.app, None, dsn(&s.email_id, "failed", "5.1.1")).await;
    r.assert_error(403, "FORBIDDEN");
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        true
    );
}

/// The page at `url` (GET or POST), with its body.
async fn page_at(client: &reqwest::Client, method: Method, url: &str) -> (u16, String) {
    let r = client.request(method, url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn subscription_pages_are_in_the_contacts_locale_with_english_as_the_fallback() {
    let s = sent(|_| {}).await;
    let links = hrefs(&s.html);
    let find = |part: &str| links.iter().find(|l| l.contains(part)).unwrap().clone();
    let (unsubscribe, manage) = (find("/unsubscribe/"), find("/manage/"));
    let client = no_redirects();
    let path = format!("/contacts/{}", s.contact_id);
    let set_locale = |locale: Value| {
        let (app, p, path) = (&s.app, &s.p, &path);
        async move {
            let r = app
                .patch(path, &p.secret_key, json!({ "data": { "locale": locale } }))
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };

    // Without a locale: English.
    let (status, body) = page_at(&client, Method::GET, &unsubscribe).await;
    assert_eq!(status, 200);
    assert!(body.contains("<html lang=\"en\">"), "{body}");
    assert!(body.contains("Stop receiving email at"), "{body}");

    // `fr-FR` matches French by its language: every page, and the buttons.
    set_locale(json!("fr-FR")).await;
    let (_, body) = page_at(&client, Method::GET, &unsubscribe).await;
    assert!(body.contains("<html lang=\"fr\">"), "{body}");
    assert!(body.contains("<title>Se désabonner</title>"), "{body}");
    assert!(
        body.contains("Ne plus recevoir d'e-mails à l'adresse <strong>ann@example.com</strong> ?"),
        "{body}"
    );
    assert!(body.contains(">Me désabonner</button>"), "{body}");
    assert!(!body.contains("Unsubscribe"), "{body}");
    let (status, body) = page_at(&client, Method::POST, &unsubscribe).await;
    assert_eq!(status, 200);
    assert!(body.contains("Vous êtes désabonné"), "{body}");
    assert!(body.contains("Me réabonner"), "{body}");
    assert_eq!(
        contact(&s.app, &s.p, &s.contact_id).await["subscribed"],
        false
    );
    let (_, body) = page_at(&client, Method::GET, &manage).await;
    assert!(body.contains("<html lang=\"fr\">"), "{body}");
    assert!(body.contains("Préférences e-mail"), "{body}");

    // German, matched exactly by language.
    set_locale(json!("de")).await;
    let (_, body) = page_at(&client, Method::GET, &manage).await;
    assert!(body.contains("<html lang=\"de\">"), "{body}");
    assert!(body.contains("E-Mail-Einstellungen"), "{body}");
    assert!(
        body.contains("Von allen Marketing-E-Mails abmelden"),
        "{body}"
    );

    // Unknown, malformed or non-string locales: English.
    for locale in [json!("xx-YY"), json!("fr\"><script>"), json!(42)] {
        set_locale(locale.clone()).await;
        let (status, body) = page_at(&client, Method::GET, &unsubscribe).await;
        assert_eq!(status, 200, "{locale}");
        assert!(body.contains("<html lang=\"en\">"), "{locale}: {body}");
        assert!(body.contains("Stop receiving email at"), "{locale}: {body}");
        assert!(!body.contains("<script"), "{body}");
    }
}
