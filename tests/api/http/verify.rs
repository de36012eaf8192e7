//! `POST /v1/verify` through HTTP, against a real DNS server on loopback (`dnsd.rs`) whose zones
//! hold one domain for each case.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hickory_server::proto::rr::RecordType;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::dnsd::DnsServer;
use crate::support::harness::{Reply, TestApp, TestProject};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A DNS server with a zone for every case.
async fn zones() -> DnsServer {
    let dns = DnsServer::start().await;
    // A mail server, nothing else.
    dns.apex("mxonly.com");
    dns.mx("mxonly.com", 10, "mail.mxonly.com");
    // No MX, but an address at the domain: mail goes there (RFC 5321 §5.1).
    dns.apex("fallback.org");
    dns.ip("fallback.org", ip("192.0.2.10"));
    // A null MX (RFC 7505), with a website.
    dns.apex("nullmx.net");
    dns.mx("nullmx.net", 0, ".");
    dns.ip("nullmx.net", ip("192.0.2.11"));
    // Exists (NS, SOA), a website at www only (through a CNAME), no MX, no address at the apex.
    dns.apex("parked.com");
    dns.cname("www.parked.com", "sites.hosting.example");
    dns.ip("sites.hosting.example", ip("2001:db8::12"));
    // Only a TXT record (no NS or SOA of its own): the name exists all the same.
    dns.txt("txtonly.org", "v=spf1 -all");
    // Never answers.
    dns.silence("slow.com");
    // Lists: a disposable, an alias, a personal provider; typo domains.
    for domain in [
        "mailinator.com",
        "duck.com",
        "gmail.com",
        "gmail.co",
        "xn--bcher-kva.de",
    ] {
        dns.apex(domain);
        dns.mx(domain, 10, &format!("mx.{domain}"));
    }
    // `yaho.com` and `gmial.com` do not exist.
    dns
}

async fn app_with(dns: &DnsServer, adjust: impl FnOnce(&mut herald::config::Settings)) -> TestApp {
    let nameserver = dns.nameserver();
    TestApp::spawn_with(move |s| {
        s.plugins.dns_nameservers = vec![nameserver];
        s.verify_dns_timeout_ms = 400;
        adjust(s);
    })
    .await
}

async fn verify(app: &TestApp, p: &TestProject, email: &str) -> Value {
    let r = app
        .post("/v1/verify", &p.secret_key, json!({ "email": email }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["success"], true, "{}", r.body);
    r.body["data"].clone()
}

fn reasons(data: &Value) -> Vec<String> {
    data["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("reasons: {data}"))
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Asserts the `/v1/verify` error body `{ code, error, message, time, requestId, errors? }`.
#[track_caller]
fn assert_public_error(r: &Reply, status: u16, code: &str) {
    assert_eq!(r.status.as_u16(), status, "{}", r.body);
    assert_eq!(r.body["code"], json!(status), "{}", r.body);
    assert_eq!(r.body["error"], code, "{}", r.body);
    assert!(r.body["message"].as_str().is_some_and(|m| !m.is_empty()));
    let now = chrono::Utc::now().timestamp_millis();
    let time = r.body["time"].as_i64().expect("time");
    assert!((now - 60_000..=now + 60_000).contains(&time), "{time}");
    let id = r.body["requestId"].as_str().expect("requestId");
    assert_eq!(r.header("x-request-id"), Some(id));
    assert!(r.body.get("success").is_none(), "not the standard body");
}

#[tokio::test]
async fn verify_mail_routes_from_dns() {
    let dns = zones().await;
    let app = app_with(&dns, |_| {}).await;
    let p = app.project().await;

    let mx = verify(&app, &p, "Ann@MXonly.com").await;
    assert_eq!(
        mx,
        json!({
            "email": "ann@mxonly.com",
            "valid": true,
            "isDisposable": false,
            "isAlias": false,
            "isTypo": false,
            "isPlusAddressed": false,
            "isPersonalEmail": false,
            "domainExists": true,
            "hasWebsite": false,
            "hasMxRecords": true,
            "suggestedEmail": null,
            "reasons": []
        })
    );

    let fallback = verify(&app, &p, "ann@fallback.org").await;
    assert_eq!(fallback["valid"], true, "{fallback}");
    assert_eq!(fallback["hasMxRecords"], false);
    assert_eq!(fallback["hasWebsite"], true);
    assert_eq!(
        reasons(&fallback),
        [
            "No mail server (MX) is published for the domain; mail goes to the domain's own address, as RFC 5321 allows."
        ]
    );

    let null = verify(&app, &p, "ann@nullmx.net").await;
    assert_eq!(null["valid"], false, "{null}");
    assert_eq!(null["domainExists"], true);
    assert_eq!(null["hasMxRecords"], false);
    assert_eq!(null["hasWebsite"], true);
    assert_eq!(
        reasons(&null),
        ["The domain nullmx.net publishes a null MX record: it accepts no mail."]
    );

    let parked = verify(&app, &p, "ann@parked.com").await;
    assert_eq!(parked["valid"], false, "{parked}");
    assert_eq!(parked["domainExists"], true);
    assert_eq!(parked["hasWebsite"], true, "www.parked.com has an address");
    assert_eq!(
        reasons(&parked),
        ["No mail server (MX) is published for the domain, and it has no address to fall back to."]
    );

    let txt = verify(&app, &p, "ann@txtonly.org").await;
    assert_eq!(txt["domainExists"], true, "{txt}");
    assert_eq!(txt["valid"], false);
    assert_eq!(txt["hasWebsite"], false);

    let nx = verify(&app, &p, "ann@nowhere-at-all.com").await;
    assert_eq!(nx["valid"], false);
    assert_eq!(nx["domainExists"], false);
    assert_eq!(nx["hasMxRecords"], false);
    assert_eq!(nx["hasWebsite"], false);
    assert_eq!(
        reasons(&nx),
        ["The domain nowhere-at-all.com does not exist."]
    );
}

#[tokio::test]
async fn verify_a_silent_dns_answers_quickly_as_unverified() {
    let dns = zones().await;
    let app = app_with(&dns, |_| {}).await;
    let p = app.project().await;
    let started = Instant::now();
    let slow = verify(&app, &p, "ann@slow.com").await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_millis(2_000),
        "answered after the 400 ms DNS timeout, not much later: {took:?}"
    );
    assert_eq!(slow["valid"], false, "{slow}");
    assert_eq!(slow["domainExists"], false);
    assert_eq!(
        reasons(&slow),
        ["DNS did not answer in time for slow.com, so the domain could not be verified."]
    );
    // Not cached: the domain is asked again (and times out again).
    let started = Instant::now();
    verify(&app, &p, "bob@slow.com").await;
    assert!(started.elapsed() >= Duration::from_millis(350));

    // Concurrent requests share one set of lookups and its failure: none of them waits for the
    // others to time out first.
    let started = Instant::now();
    let addresses: Vec<String> = (0..6).map(|i| format!("user{i}@slow.com")).collect();
    let answers = futures::future::join_all(addresses.iter().map(|a| verify(&app, &p, a))).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1_500),
        "six concurrent requests took {took:?}"
    );
    for answer in answers {
        assert_eq!(answer["valid"], false);
        assert!(reasons(&answer)[0].starts_with("DNS did not answer in time"));
    }
}

#[tokio::test]
async fn verify_lists_plus_addressing_and_typos() {
    let dns = zones().await;
    let app = app_with(&dns, |_| {}).await;
    let p = app.project().await;

    let disposable = verify(&app, &p, "ann@mailinator.com").await;
    assert_eq!(disposable["isDisposable"], true, "{disposable}");
    assert_eq!(disposable["valid"], false, "disposable is never valid");
    assert_eq!(disposable["hasMxRecords"], true);
    assert_eq!(
        reasons(&disposable),
        ["mailinator.com is a disposable email provider."]
    );

    let alias = verify(&app, &p, "x7k2@duck.com").await;
    assert_eq!(alias["isAlias"], true, "{alias}");
    assert_eq!(alias["valid"], true, "an alias still receives mail");
    assert_eq!(
        reasons(&alias),
        ["duck.com is an alias service that forwards to another mailbox."]
    );

    let personal = verify(&app, &p, "Ann.Lee+Newsletters@gmail.com").await;
    assert_eq!(personal["email"], "ann.lee+newsletters@gmail.com");
    assert_eq!(personal["valid"], true, "{personal}");
    assert_eq!(personal["isPersonalEmail"], true);
    assert_eq!(personal["isPlusAddressed"], true);
    assert_eq!(personal["isTypo"], false);
    assert_eq!(
        reasons(&personal),
        [
            "gmail.com is a personal mailbox provider.",
            "The address has a +tag (plus addressing)."
        ]
    );

    // A typo of a domain that does not exist: invalid through DNS, with a suggestion.
    let typo = verify(&app, &p, "ann@yaho.com").await;
    assert_eq!(typo["isTypo"], true, "{typo}");
    assert_eq!(typo["suggestedEmail"], "ann@yahoo.com");
    assert_eq!(typo["valid"], false);
    assert_eq!(
        reasons(&typo),
        [
            "The domain yaho.com does not exist.",
            "The domain yaho.com looks like a typo of yahoo.com."
        ]
    );
    // A typo of a domain that exists receives mail: valid, but flagged.
    let co = verify(&app, &p, "ann+x@gmail.co").await;
    assert_eq!(co["isTypo"], true, "{co}");
    assert_eq!(co["valid"], true);
    assert_eq!(co["suggestedEmail"], "ann+x@gmail.com");
    assert_eq!(co["isPersonalEmail"], false);
    // The classic: gmial.com is a registered throw-away domain as well as a typo.
    let gmial = verify(&app, &p, "ann@gmial.com").await;
    assert_eq!(gmial["suggestedEmail"], "ann@gmail.com", "{gmial}");
    assert_eq!(gmial["isDisposable"], true);
    assert!(
        reasons(&gmial).contains(&"The domain gmial.com looks like a typo of gmail.com.".into())
    );
}

#[tokio::test]
async fn verify_syntax_quoted_idn_and_errors() {
    let dns = zones().await;
    let app = app_with(&dns, |s| s.verify_dns_timeout_ms = 3_000).await;
    let p = app.project().await;

    let quoted = verify(&app, &p, "\"John Doe\"@mxonly.com").await;
    assert_eq!(quoted["email"], "\"John Doe\"@mxonly.com", "{quoted}");
    assert_eq!(quoted["valid"], true);
    assert_eq!(quoted["isPlusAddressed"], false);
    let quoted_plus = verify(&app, &p, "\"ann+x\"@mxonly.com").await;
    assert_eq!(
        quoted_plus["isPlusAddressed"], false,
        "plus addressing is a dot-atom convention"
    );

    let idn = verify(&app, &p, "user@Bücher.de").await;
    assert_eq!(idn["email"], "user@xn--bcher-kva.de", "{idn}");
    assert_eq!(idn["valid"], true);
    assert_eq!(idn["hasMxRecords"], true);

    // Not addresses: 200 with the reason, and no DNS lookup (slow.com would take 3 s).
    for (input, reason) in [
        (
            "plainaddress",
            "The address is not valid: an email address needs one @ between a local part and a domain, like ann@example.com.",
        ),
        (
            "ann lee@slow.com",
            "The address is not valid: the part before @ is not valid: it contains a space; quote it or remove the space.",
        ),
        (
            "ann..lee@slow.com",
            "The address is not valid: the part before @ is not valid: dots may not lead, trail or follow each other.",
        ),
        (
            "ann@slow",
            "The address is not valid: the domain is not valid: it needs a dot, like example.com.",
        ),
        (
            "Ann <ann@slow.com>",
            "The address is not valid: send only the address, without a name or angle brackets, like ann@example.com.",
        ),
        (
            "   ",
            "The address is not valid: the email address is empty.",
        ),
    ] {
        let started = Instant::now();
        let data = verify(&app, &p, input).await;
        assert!(
            started.elapsed() < Duration::from_millis(1_500),
            "{input}: no lookup"
        );
        assert_eq!(data["valid"], false, "{input}: {data}");
        assert_eq!(data["email"], input.trim());
        assert_eq!(data["domainExists"], false);
        assert_eq!(data["suggestedEmail"], Value::Null);
        assert_eq!(reasons(&data), [reason], "{input}");
    }
}

#[tokio::test]
async fn verify_request_errors_use_the_public_body() {
    let dns = zones().await;
    let app = app_with(&dns, |_| {}).await;
    let p = app.project().await;

    let missing = app.post("/v1/verify", &p.secret_key, json!({})).await;
    assert_public_error(&missing, 422, "VALIDATION_ERROR");
    assert_eq!(
        missing.body["errors"][0]["field"], "email",
        "{}",
        missing.body
    );

    let wrong_type = app
        .post("/v1/verify", &p.secret_key, json!({ "email": 42 }))
        .await;
    assert_public_error(&wrong_type, 400, "INVALID_REQUEST_BODY");
    assert_eq!(wrong_type.body["errors"][0]["field"], "email");

    let not_json = app
        .call_with(
            &app.client,
            Method::POST,
            "/v1/verify",
            Some(&p.secret_key),
            None,
            &[("content-type", "application/json")],
        )
        .await;
    assert_public_error(&not_json, 400, "INVALID_REQUEST_BODY");

    let public = app
        .post(
            "/v1/verify",
            &p.public_key,
            json!({ "email": "ann@mxonly.com" }),
        )
        .await;
    assert_public_error(&public, 401, "INVALID_API_KEY");

    let anonymous = app
        .call(
            Method::POST,
            "/v1/verify",
            None,
            Some(json!({ "email": "ann@mxonly.com" })),
        )
        .await;
    assert_public_error(&anonymous, 401, "MISSING_AUTH");
}

#[tokio::test]
async fn verify_caches_dns_facts_for_the_ttl() {
    let dns = zones().await;
    dns.apex("changing.com");
    dns.mx("changing.com", 10, "mx.changing.com");
    let app = app_with(&dns, |s| s.verify_cache_seconds = 4).await;
    let p = app.project().await;

    let first = verify(&app, &p, "ann@changing.com").await;
    assert_eq!(first["valid"], true, "{first}");
    assert_eq!(first["hasMxRecords"], true);

    // The zone drops its MX. Past the one-second TTL of the loopback server's records (so the
    // resolver's own cache no longer has them) but within ours, the cached facts still answer,
    // for any address at the domain.
    dns.remove("changing.com", RecordType::MX);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let cached = verify(&app, &p, "bob@changing.com").await;
    assert_eq!(cached["valid"], true, "{cached}");
    assert_eq!(cached["hasMxRecords"], true);

    // After our TTL the change shows.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let fresh = verify(&app, &p, "ann@changing.com").await;
    assert_eq!(fresh["hasMxRecords"], false, "{fresh}");
    assert_eq!(fresh["valid"], false);
    assert_eq!(fresh["domainExists"], true);
}

#[tokio::test]
async fn verify_without_cache_sees_every_change() {
    let dns = zones().await;
    dns.apex("nocache.com");
    let app = app_with(&dns, |s| s.verify_cache_seconds = 0).await;
    let p = app.project().await;
    assert_eq!(
        verify(&app, &p, "a@nocache.com").await["hasMxRecords"],
        false
    );
    dns.mx("nocache.com", 10, "mx.nocache.com");
    // The loopback server's answers live one second in the resolver's own cache.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let now = verify(&app, &p, "a@nocache.com").await;
    assert_eq!(now["hasMxRecords"], true, "{now}");
    assert_eq!(now["valid"], true);
}
