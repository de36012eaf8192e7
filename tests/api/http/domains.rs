//! `/domains`: DKIM keys, the records to publish, verification against a real DNS server on
//! loopback (verified, missing DKIM, wrong SPF, NXDOMAIN, records that disappear, a server that
//! never answers), the background re-check, and tenant isolation.

use std::time::{Duration, Instant};

use herald::config::Settings;
use serde_json::{Value, json};

use crate::support::dnsd::DnsServer;
use crate::support::harness::{TestApp, TestProject};

const MAIL_HOST: &str = "mail.herald.test";
const SPF: &str = "include:spf.herald.test";

/// Settings for an app that resolves through `dns` (and a fixed mail host and SPF mechanism).
pub fn with_dns(dns: &DnsServer) -> impl FnOnce(&mut Settings) + '_ {
    move |s: &mut Settings| {
        s.plugins.dns_nameservers = vec![dns.nameserver()];
        s.plugins.dns_timeout_ms = 400;
        s.domains.mail_host = Some(MAIL_HOST.into());
        s.domains.spf_include = Some(SPF.into());
    }
}

async fn add(app: &TestApp, p: &TestProject, domain: &str) -> Value {
    let r = app
        .post("/domains", &p.secret_key, json!({ "domain": domain }))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

async fn verify(app: &TestApp, p: &TestProject, id: &str) -> Value {
    let r = app
        .get(&format!("/domains/{id}/verify"), &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// The record of `body` whose name starts with `prefix` and has `kind`.
fn record<'a>(body: &'a Value, kind: &str, name: &str) -> &'a Value {
    body["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == kind && r["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} record at {name} in {body}"))
}

fn dkim(body: &Value) -> &Value {
    body["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str().unwrap().contains("._domainkey."))
        .expect("a DKIM record")
}

/// Adds `name` to the project, publishes its records in `dns` and verifies it; answers the
/// verified domain.
pub async fn verified_domain(app: &TestApp, p: &TestProject, dns: &DnsServer, name: &str) -> Value {
    let body = add(app, p, name).await;
    dns.apex(name);
    publish(dns, &body);
    // The background check that runs when a domain is added may have cached "no record" for a
    // second; ask again until the published records are seen.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let checked = verify(app, p, body["id"].as_str().unwrap()).await;
        if checked["status"] == "verified" {
            return checked;
        }
        assert!(Instant::now() < deadline, "{checked}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Publishes every required record of `body` in `dns`.
pub fn publish(dns: &DnsServer, body: &Value) {
    for r in body["records"].as_array().unwrap() {
        if r["required"] != true {
            continue;
        }
        let name = r["name"].as_str().unwrap();
        let value = r["value"].as_str().unwrap();
        match r["type"].as_str().unwrap() {
            "TXT" => dns.txt(name, value),
            "MX" => {
                let (pref, host) = value.split_once(' ').unwrap();
                dns.mx(name, pref.parse().unwrap(), host);
            }
            other => panic!("unexpected record type {other}"),
        }
    }
}

#[tokio::test]
async fn a_domain_gets_a_dkim_key_and_the_records_to_publish() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    let body = add(&app, &p, " Acme.TEST. ").await;
    assert!(body["id"].as_str().unwrap().starts_with("dom_"));
    assert_eq!(body["domain"], "acme.test");
    assert_eq!(body["status"], "pending");
    let records = body["records"].as_array().unwrap();
    assert_eq!(records.len(), 4, "{body}");
    assert!(records.iter().all(|r| r["status"] == "pending"));

    let selector = body["dkimSelector"].as_str().unwrap();
    let key = dkim(&body);
    assert_eq!(key["type"], "TXT");
    assert_eq!(key["name"], format!("{selector}._domainkey.acme.test"));
    assert_eq!(key["required"], true);
    let value = key["value"].as_str().unwrap();
    let p_tag = value.strip_prefix("v=DKIM1; k=rsa; p=").expect(value);
    // An RSA-2048 SubjectPublicKeyInfo is 294 bytes: 392 base64 characters.
    assert_eq!(p_tag.len(), 392, "{value}");

    let spf = record(&body, "TXT", "acme.test");
    assert_eq!(spf["value"], format!("v=spf1 {SPF} ~all"));
    assert_eq!(spf["required"], true);
    let mx = record(&body, "MX", "bounces.acme.test");
    assert_eq!(mx["value"], format!("10 {MAIL_HOST}"));
    let dmarc = record(&body, "TXT", "_dmarc.acme.test");
    assert_eq!(dmarc["required"], false, "DMARC is recommended only");

    // The private key is never shown.
    let text = body.to_string();
    assert!(!text.contains("PRIVATE"), "{text}");
    let listed = app
        .get(&format!("/domains/project/{}", p.id), &p.secret_key)
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body.as_array().unwrap().len(), 1);
    assert!(!listed.body.to_string().contains("PRIVATE"));

    // IDNs are stored in their ASCII form.
    let idn = add(&app, &p, "bücher.test").await;
    assert_eq!(idn["domain"], "xn--bcher-kva.test");
    // The same domain twice is a conflict.
    let again = app
        .post("/domains", &p.secret_key, json!({ "domain": "acme.test" }))
        .await;
    again.assert_error(409, "CONFLICT");
}

#[tokio::test]
async fn bad_domain_names_are_422_with_what_to_fix() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    for (bad, expect) in [
        ("https://acme.test/", "without a scheme"),
        ("acme", "needs a dot"),
        ("ann@acme.test", "without a scheme, path or @"),
        ("acme.test:25", "without a port"),
        ("bad_name.test", "letters, digits, hyphens"),
        ("", "empty"),
        ("printer.local", "reserved"),
    ] {
        let r = app
            .post("/domains", &p.secret_key, json!({ "domain": bad }))
            .await;
        r.assert_error(422, "VALIDATION_ERROR");
        assert_eq!(r.error_fields(), ["domain"], "{bad}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expect), "{bad}: {message}");
    }
    let r = app.post("/domains", &p.secret_key, json!({})).await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), ["domain"]);
    let r = app
        .post("/domains", &p.secret_key, json!({ "domain": 7 }))
        .await;
    r.assert_error(400, "INVALID_REQUEST_BODY");
    // The public key may not manage domains.
    let r = app
        .post("/domains", &p.public_key, json!({ "domain": "acme.test" }))
        .await;
    r.assert_error(401, "INVALID_API_KEY");
}

#[tokio::test]
async fn verification_follows_what_dns_answers() {
    let dns = DnsServer::start().await;
    dns.apex("acme.test");
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;
    let body = add(&app, &p, "acme.test").await;
    let id = body["id"].as_str().unwrap().to_string();

    // Nothing published yet: pending, with what is missing.
    let checked = verify(&app, &p, &id).await;
    assert_eq!(checked["status"], "pending", "{checked}");
    assert!(
        checked["failureReason"]
            .as_str()
            .unwrap()
            .contains("DKIM TXT record"),
        "{checked}"
    );
    assert!(checked["lastCheckedAt"].is_string());

    // Everything but DKIM: still pending; the DKIM record says so.
    let dkim_name = dkim(&body)["name"].as_str().unwrap().to_string();
    publish(&dns, &body);
    dns.remove(&dkim_name, hickory_server::proto::rr::RecordType::TXT);
    tokio::time::sleep(Duration::from_millis(1100)).await; // the resolver's negative cache (1 s)
    let checked = verify(&app, &p, &id).await;
    assert_eq!(checked["status"], "pending", "{checked}");
    assert_eq!(dkim(&checked)["status"], "pending");
    assert_eq!(record(&checked, "TXT", "acme.test")["status"], "verified");
    assert_eq!(
        record(&checked, "MX", "bounces.acme.test")["status"],
        "verified"
    );

    // With DKIM (split into 255-byte strings, as DNS stores long TXT values): verified.
    dns.txt(&dkim_name, dkim(&body)["value"].as_str().unwrap());
    tokio::time::sleep(Duration::from_millis(1100)).await; // the resolver's negative cache (1 s)
    let checked = verify(&app, &p, &id).await;
    assert_eq!(checked["status"], "verified", "{checked}");
    assert!(checked["failureReason"].is_null());
    assert!(checked["verifiedAt"].is_string());
    assert_eq!(dkim(&checked)["status"], "verified");
    assert_eq!(
        record(&checked, "TXT", "_dmarc.acme.test")["status"],
        "pending",
        "DMARC is only recommended"
    );

    // The DKIM record disappears: failed, with the reason.
    dns.remove(&dkim_name, hickory_server::proto::rr::RecordType::TXT);
    tokio::time::sleep(Duration::from_millis(1100)).await; // the resolver's cache (TTL 1 s)
    let checked = verify(&app, &p, &id).await;
    assert_eq!(checked["status"], "failed", "{checked}");
    let reason = checked["failureReason"].as_str().unwrap();
    assert!(
        reason.contains("disappeared") && reason.contains("DKIM"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_wrong_spf_fails_and_unknown_or_silent_domains_stay_pending() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let p = app.project().await;

    // Wrong SPF: another provider's include.
    dns.apex("wrongspf.test");
    let body = add(&app, &p, "wrongspf.test").await;
    publish(&dns, &body);
    dns.remove("wrongspf.test", hickory_server::proto::rr::RecordType::TXT);
    dns.txt("wrongspf.test", "v=spf1 include:_spf.other.example -all");
    tokio::time::sleep(Duration::from_millis(1100)).await; // the resolver's negative cache (1 s)
    let checked = verify(&app, &p, body["id"].as_str().unwrap()).await;
    assert_eq!(checked["status"], "failed", "{checked}");
    let spf = record(&checked, "TXT", "wrongspf.test");
    assert_eq!(spf["status"], "failed");
    assert_eq!(
        spf["found"],
        json!(["v=spf1 include:_spf.other.example -all"])
    );
    let reason = checked["failureReason"].as_str().unwrap();
    assert!(reason.contains("SPF") && reason.contains(SPF), "{reason}");

    // NXDOMAIN: nothing exists under the name.
    let body = add(&app, &p, "nowhere.test").await;
    let checked = verify(&app, &p, body["id"].as_str().unwrap()).await;
    assert_eq!(checked["status"], "pending", "{checked}");
    assert!(
        checked["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "pending" && r["found"] == json!([]))
    );

    // A nameserver that never answers: the check ends within the DNS timeout, pending.
    dns.silence("slow.test");
    let body = add(&app, &p, "slow.test").await;
    let started = Instant::now();
    let checked = verify(&app, &p, body["id"].as_str().unwrap()).await;
    assert_eq!(checked["status"], "pending", "{checked}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn domains_of_another_project_are_404() {
    let dns = DnsServer::start().await;
    let app = TestApp::spawn_with(with_dns(&dns)).await;
    let a = app.project().await;
    let b = app.project().await;
    let body = add(&app, &a, "acme.test").await;
    let id = body["id"].as_str().unwrap();

    for path in [
        format!("/domains/{id}"),
        format!("/domains/{id}/verify"),
        format!("/domains/project/{}", a.id),
    ] {
        app.get(&path, &b.secret_key)
            .await
            .assert_error(404, "NOT_FOUND");
    }
    app.patch(
        &format!("/domains/{id}"),
        &b.secret_key,
        json!({ "allowSubdomains": true }),
    )
    .await
    .assert_error(404, "NOT_FOUND");
    app.delete(&format!("/domains/{id}"), &b.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    app.get("/domains/dom_nonsense", &a.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
    // B may add the same domain name: its own key, its own records; and verify its own domains.
    let theirs = add(&app, &b, "acme.test").await;
    assert_ne!(dkim(&theirs)["value"], dkim(&body)["value"]);
    verified_domain(&app, &b, &dns, "beta.test").await;
    let listed = app
        .get(&format!("/domains/project/{}", b.id), &b.secret_key)
        .await;
    let statuses: Vec<&Value> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["status"])
        .collect();
    assert_eq!(statuses, [&json!("pending"), &json!("verified")]);
    let listed = app
        .get(&format!("/domains/project/{}", a.id), &a.secret_key)
        .await;
    assert_eq!(
        listed.body.as_array().unwrap().len(),
        1,
        "A sees only its own"
    );

    // A's domain is intact; A can change and remove it.
    let r = app
        .patch(
            &format!("/domains/{id}"),
            &a.secret_key,
            json!({ "allowSubdomains": true }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["allowSubdomains"], true);
    let r = app.delete(&format!("/domains/{id}"), &a.secret_key).await;
    assert_eq!(r.status, 204);
    app.get(&format!("/domains/{id}"), &a.secret_key)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn the_background_check_verifies_a_domain_once_its_records_appear() {
    let dns = DnsServer::start().await;
    dns.apex("later.test");
    let app = TestApp::spawn_with(|s| {
        with_dns(&dns)(s);
        s.domains.check_interval_seconds = 1;
        s.jobs_poll_interval_ms = 50;
    })
    .await;
    let p = app.project().await;
    let body = add(&app, &p, "later.test").await;
    let id = body["id"].as_str().unwrap();

    // The first background check runs at once and finds nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = app.get(&format!("/domains/{id}"), &p.secret_key).await;
        if r.body["lastCheckedAt"].is_string() {
            assert_eq!(r.body["status"], "pending", "{}", r.body);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no background check ran: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The records appear; a later background check verifies the domain.
    publish(&dns, &body);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = app.get(&format!("/domains/{id}"), &p.secret_key).await;
        if r.body["status"] == "verified" {
            assert!(r.body["verifiedAt"].is_string());
            break;
        }
        assert!(Instant::now() < deadline, "still not verified: {}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Deleting the domain ends its chain of checks: no check job stays queued for it.
    let r = app.delete(&format!("/domains/{id}"), &p.secret_key).await;
    assert_eq!(r.status, 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let queued = app
            .state()
            .store()
            .count_queued_jobs("domains.check")
            .await
            .unwrap();
        if queued == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{queued} checks still queued");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
