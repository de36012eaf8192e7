//! The DNS capability and the default DNS verifier against a real DNS server on loopback
//! (hickory-server, in process, with a test zone).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use herald::plugins::{Grants, Limits, Outcome, RecordStatus, Requirement, SendingDomain, World};
use hickory_server::Server;
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, MX, NS, SOA, TXT};
use hickory_server::proto::rr::{LowerName, Name, RData, Record};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use serde_json::json;

use super::{HOSTILE, input, manifest, start};

const DKIM_KEY: &str = "MFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ";

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

/// Serves `example.test` on 127.0.0.1 (UDP and TCP, the same random port).
async fn dns_server() -> SocketAddr {
    let origin = name("example.test.");
    let mut zone = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
        origin.clone(),
        ZoneType::Primary,
        AxfrPolicy::Deny,
    );
    let records = [
        (
            "example.test.",
            RData::SOA(SOA::new(
                name("ns1.example.test."),
                name("admin.example.test."),
                1,
                3600,
                600,
                86400,
                60,
            )),
        ),
        ("example.test.", RData::NS(NS(name("ns1.example.test.")))),
        (
            "example.test.",
            RData::TXT(TXT::new(vec!["v=spf1 include:spf.herald.test ~all".into()])),
        ),
        (
            "example.test.",
            RData::TXT(TXT::new(vec!["google-site-verification=abc".into()])),
        ),
        (
            "herald._domainkey.example.test.",
            RData::TXT(TXT::new(vec![
                "v=DKIM1; k=rsa; ".into(),
                format!("p={DKIM_KEY}"),
            ])),
        ),
        (
            "bounces.example.test.",
            RData::MX(MX::new(10, name("mail.herald.test."))),
        ),
        (
            "_dmarc.example.test.",
            RData::TXT(TXT::new(vec!["v=DMARC1; p=quarantine".into()])),
        ),
        ("a.example.test.", RData::A(A::new(192, 0, 2, 10))),
        (
            "a.example.test.",
            RData::AAAA(AAAA::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 10)),
        ),
        (
            "www.example.test.",
            RData::CNAME(CNAME(name("a.example.test."))),
        ),
        // A second domain whose DKIM key is wrong and which has no MX.
        (
            "other.test.",
            RData::TXT(TXT::new(vec!["v=DKIM1; p=WRONG".into()])),
        ),
    ];
    for (owner, rdata) in records {
        if owner.ends_with("example.test.") {
            zone.upsert_mut(Record::from_rdata(name(owner), 300, rdata), 1);
        }
    }
    let mut other = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
        name("other.test."),
        ZoneType::Primary,
        AxfrPolicy::Deny,
    );
    other.upsert_mut(
        Record::from_rdata(
            name("other.test."),
            300,
            RData::SOA(SOA::new(
                name("ns1.other.test."),
                name("admin.other.test."),
                1,
                3600,
                600,
                86400,
                60,
            )),
        ),
        1,
    );
    other.upsert_mut(
        Record::from_rdata(
            name("herald._domainkey.other.test."),
            300,
            RData::TXT(TXT::new(vec!["v=DKIM1; p=WRONG".into()])),
        ),
        1,
    );
    let mut catalog = Catalog::new();
    catalog.upsert(LowerName::new(&origin), vec![Arc::new(zone)]);
    catalog.upsert(LowerName::new(&name("other.test.")), vec![Arc::new(other)]);

    // One port for UDP and TCP: the UDP port the system picks may be taken for TCP; pick again.
    let (udp, tcp, addr) = loop {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        if let Ok(tcp) = tokio::net::TcpListener::bind(addr).await {
            break (udp, tcp, addr);
        }
    };
    let mut server = Server::new(catalog);
    server.register_socket(udp);
    server.register_listener(tcp, Duration::from_secs(5), 4096);
    tokio::spawn(async move {
        let _ = server.block_until_done().await;
    });
    addr
}

/// Installs the hostile test step as `hostile`, granted only `dns`: its `dns` mode looks a name
/// up and reports the answers.
fn install_dns_probe(plugins: &herald::plugins::Plugins) {
    let grants = Grants {
        dns: true,
        ..Grants::default()
    };
    let plugin = plugins
        .load(
            &manifest("hostile", World::Step, grants),
            HOSTILE,
            "test".into(),
        )
        .unwrap();
    plugins.install(plugin).unwrap();
}

fn domain(name: &str) -> SendingDomain {
    SendingDomain {
        name: name.into(),
        dkim_selector: "herald".into(),
        dkim_public_key: DKIM_KEY.into(),
        mail_host: "mail.herald.test".into(),
        spf_include: "include:spf.herald.test".into(),
    }
}

#[tokio::test]
async fn the_dns_capability_resolves_every_record_type_through_the_configured_nameserver() {
    let addr = dns_server().await;
    let (plugins, _dir) = start(|s| s.dns_nameservers = vec![addr.to_string()]);
    install_dns_probe(&plugins);
    let cases = [
        ("a.example.test", "A", json!(["192.0.2.10"])),
        ("a.example.test", "AAAA", json!(["2001:db8::a"])),
        (
            "bounces.example.test",
            "MX",
            json!(["10 mail.herald.test."]),
        ),
        (
            "_dmarc.example.test",
            "TXT",
            json!(["v=DMARC1; p=quarantine"]),
        ),
        ("www.example.test", "CNAME", json!(["a.example.test."])),
        ("example.test", "NS", json!(["ns1.example.test."])),
    ];
    for (name, record, expected) in cases {
        let config = json!({ "plugin": "hostile", "mode": "dns", "name": name, "record": record });
        let result = plugins.run_step("PLUGIN", &input(config)).await.unwrap();
        assert_eq!(
            result.outcome,
            Outcome::Continue { branch: None },
            "{name} {record}"
        );
        let herald::plugins::Effect::SetContext { value, .. } = &result.effects[0] else {
            panic!("{result:?}")
        };
        assert_eq!(value, &expected, "{name} {record}");
    }
    let config = json!({ "plugin": "hostile", "mode": "dns", "name": "nothing.example.test", "record": "A" });
    let result = plugins.run_step("PLUGIN", &input(config)).await.unwrap();
    assert!(
        matches!(result.outcome, Outcome::Fail { ref message } if message.contains("NotFound")),
        "{result:?}"
    );
    let _ = Limits::default();
}

#[tokio::test]
async fn the_default_verifier_lists_and_verifies_the_records() {
    let addr = dns_server().await;
    let (plugins, _dir) = start(|s| s.dns_nameservers = vec![addr.to_string()]);

    let records = plugins
        .domain_records(&domain("example.test"))
        .await
        .unwrap();
    let summary: Vec<(String, String, bool)> = records
        .iter()
        .map(|r| {
            (
                r.record_type.clone(),
                r.name.clone(),
                matches!(r.requirement, Requirement::Required),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "TXT".to_string(),
                "herald._domainkey.example.test".to_string(),
                true
            ),
            ("TXT".to_string(), "example.test".to_string(), true),
            ("MX".to_string(), "bounces.example.test".to_string(), true),
            ("TXT".to_string(), "_dmarc.example.test".to_string(), false),
        ]
    );
    assert_eq!(records[0].value, format!("v=DKIM1; k=rsa; p={DKIM_KEY}"));
    assert_eq!(records[1].value, "v=spf1 include:spf.herald.test ~all");
    assert_eq!(records[2].value, "10 mail.herald.test");

    let checked = plugins
        .verify_domain(&domain("example.test"))
        .await
        .unwrap();
    for record in &checked {
        assert!(
            matches!(record.status, RecordStatus::Verified),
            "{record:?}"
        );
        assert!(!record.found.is_empty());
    }

    // other.test: a wrong DKIM key fails, the missing records are pending.
    let checked = plugins.verify_domain(&domain("other.test")).await.unwrap();
    assert!(
        matches!(checked[0].status, RecordStatus::Failed),
        "{:?}",
        checked[0]
    );
    assert_eq!(checked[0].found, ["v=DKIM1; p=WRONG"]);
    for record in &checked[1..] {
        assert!(matches!(record.status, RecordStatus::Pending), "{record:?}");
    }
}

#[tokio::test]
async fn time_spent_waiting_on_dns_does_not_count_against_the_plugin_deadline() {
    // Every lookup waits the whole DNS timeout (the server never answers): four lookups take
    // about four times 400 ms, far beyond the 300 ms deadline of the guest's own work.
    let dns = crate::support::dnsd::DnsServer::start().await;
    dns.silence("silent.test");
    let (plugins, _dir) = start(|s| {
        s.dns_nameservers = vec![dns.nameserver()];
        s.dns_timeout_ms = 400;
        s.timeout_ms = 300;
    });
    let started = std::time::Instant::now();
    let checked = plugins
        .verify_domain(&domain("silent.test"))
        .await
        .expect("the call finishes: I/O time is not guest time");
    assert!(started.elapsed() >= Duration::from_millis(1200));
    assert_eq!(checked.len(), 4);
    for record in &checked {
        assert!(matches!(record.status, RecordStatus::Pending), "{record:?}");
    }

    // The I/O budget still bounds the whole call.
    let (plugins, _dir) = start(|s| {
        s.dns_nameservers = vec![dns.nameserver()];
        s.dns_timeout_ms = 400;
        s.timeout_ms = 300;
        s.io_budget_ms = 500;
    });
    let err = plugins
        .verify_domain(&domain("silent.test"))
        .await
        .expect_err("beyond the I/O budget the call ends");
    assert!(
        matches!(err, herald::plugins::PluginError::Timeout { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_dns_capability_follows_cnames_to_addresses() {
    let dns = crate::support::dnsd::DnsServer::start().await;
    dns.cname("www.site.test", "host.site.test");
    dns.ip("host.site.test", "192.0.2.7".parse().unwrap());
    dns.ip("host.site.test", "2001:db8::7".parse().unwrap());
    let (plugins, _dir) = start(|s| s.dns_nameservers = vec![dns.nameserver()]);
    install_dns_probe(&plugins);
    for (record, expected) in [
        ("A", json!(["192.0.2.7"])),
        ("AAAA", json!(["2001:db8::7"])),
    ] {
        let config = json!({ "plugin": "hostile", "mode": "dns", "name": "www.site.test", "record": record });
        let result = plugins.run_step("PLUGIN", &input(config)).await.unwrap();
        let herald::plugins::Effect::SetContext { value, .. } = &result.effects[0] else {
            panic!("{result:?}")
        };
        assert_eq!(value, &expected, "{record}");
    }
}
