//! The generated Rust client against the real server (on a fresh SQLite file, or a fresh schema
//! of `HERALD_TEST_POSTGRES_URL`): signup and a project, contacts (create, read, change, every
//! page of the list), track with an idempotency key and its replay, confirmed opt-in (a public-key
//! subscription left pending), a send to two recipients, templates, a sending domain, an
//! address check, activity, a campaign with an A/B test, and a 404 and 422 decoded as the typed
//! errors. Every body is decoded by the generated types; a field the document gets wrong
//! fails the decoding and the test.

use herald_client_tests::{Client, Error, types};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

/// The database URL of a fresh, empty database.
async fn fresh_database_url(dir: &std::path::Path) -> String {
    let Some(url) = std::env::var("HERALD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
    else {
        return format!("sqlite://{}", dir.join("herald.db").display());
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut conn: sqlx::PgConnection = sqlx::Connection::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("HERALD_TEST_POSTGRES_URL is set but unreachable: {e}"));
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .expect("create schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// A generated client whose requests carry `key` as the bearer token.
fn keyed(base: &str, key: &str) -> Client {
    let mut headers = HeaderMap::new();
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    Client::new_with_client(base, http)
}

/// The typed error body of a refused call; panics on success or on any other failure (a body
/// the generated type cannot decode among them).
fn refused<T: std::fmt::Debug, E: std::fmt::Debug>(result: Result<T, Error<E>>) -> (u16, E) {
    match result {
        Err(Error::ErrorResponse(r)) => (r.status().as_u16(), r.into_inner()),
        Err(other) => panic!("not a documented error body: {other}"),
        Ok(value) => panic!("expected an error, got {value:?}"),
    }
}

#[tokio::test]
async fn the_generated_client_goes_through_the_main_flow() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database_url(dir.path()).await;
    let settings = herald::config::Settings {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_path_buf(),
        database_url: Some(url),
        database_max_connections: 4,
        domains: herald::config::DomainSettings {
            // The send below is from a domain that no DNS verifies here.
            allow_unverified: true,
            ..Default::default()
        },
        plugins: herald::plugins::PluginSettings {
            cache_dir: Some(
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    let server = herald::app::App::build(settings)
        .await
        .expect("server starts")
        .spawn();
    let base = server.url();

    // Signup and a project, with the session cookie the signup sets.
    let session = Client::new_with_client(
        &base,
        reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .unwrap(),
    );
    let email = format!("owner-{}@example.com", uuid::Uuid::new_v4().simple());
    let signed_up = session
        .signup(&types::Signup {
            email: email.clone(),
            password: "correct horse battery".into(),
            invitation: None,
        })
        .await
        .expect("signup");
    assert_eq!(signed_up.status().as_u16(), 201);
    let me = session.get_me().await.expect("me").into_inner();
    assert_eq!(me.email, email);
    let project = session
        .create_project(&types::CreateProject {
            name: "Rust client".into(),
        })
        .await
        .expect("project");
    assert_eq!(project.status().as_u16(), 201);
    let project = project.into_inner();
    let sk = keyed(&base, &project.secret_key);
    let pk = keyed(&base, &project.public_key);

    // Contacts: create, read, change, and every page of the list.
    let mut ids = Vec::new();
    for i in 0..5 {
        let created = sk
            .upsert_contact(
                None,
                &types::CreateContact {
                    email: format!("c{i}@example.com"),
                    data: None,
                    subscribed: None,
                    topics: None,
                },
            )
            .await
            .expect("create contact")
            .into_inner();
        ids.push(created.id);
    }
    let contact = sk.get_contact(&ids[0], None).await.expect("get contact");
    assert_eq!(contact.email, "c0@example.com");
    let changed = sk
        .update_contact(
            &ids[0],
            None,
            &types::UpdateContact {
                subscribed: Some(false),
                email: None,
                data: None,
                topics: None,
            },
        )
        .await
        .expect("update contact")
        .into_inner();
    assert!(!changed.subscribed);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = sk
            .list_contacts(cursor.as_deref(), std::num::NonZeroU32::new(2), None, None)
            .await
            .expect("a page of contacts")
            .into_inner();
        pages += 1;
        seen.extend(page.data.into_iter().map(|c| c.id));
        if !page.has_more {
            // The last page's cursor is null, as the document says it may be.
            assert_eq!(page.cursor, None);
            break;
        }
        cursor = page.cursor;
        assert!(cursor.is_some(), "a page with more has a cursor");
    }
    assert_eq!(pages, 3);
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);

    // Topics: one created, a contact's choice made on its record and read back.
    let news = sk
        .create_topic(
            None,
            &types::CreateTopic {
                name: "News".into(),
                description: None,
                default_subscription: types::TopicDefault::OptIn,
                visibility: Some(types::TopicVisibility::Public),
            },
        )
        .await
        .expect("create topic")
        .into_inner();
    assert!(news.id.starts_with("top_"));
    sk.update_contact(
        &ids[1],
        None,
        &types::UpdateContact {
            subscribed: None,
            email: None,
            data: None,
            topics: Some(vec![types::TopicSetting {
                id: news.id.clone(),
                subscribed: false,
            }]),
        },
    )
    .await
    .expect("leave the topic");
    let read = sk
        .get_contact(&ids[1], None)
        .await
        .expect("get contact")
        .into_inner();
    assert_eq!(read.topics.len(), 1);
    assert_eq!(read.topics[0].id, news.id);
    assert!(!read.topics[0].subscribed);
    let topics = sk
        .list_topics(None)
        .await
        .expect("list topics")
        .into_inner();
    assert_eq!(topics.len(), 1);

    // Track with an idempotency key, then its replay.
    let track = types::TrackRequest {
        email: "c1@example.com".into(),
        event: "signed-up".into(),
        data: None,
        subscribed: None,
        topics: None,
    };
    let first = pk.track(Some("rust-1"), None, &track).await.expect("track");
    assert!(first.headers().get("Idempotent-Replayed").is_none());
    let again = pk
        .track(Some("rust-1"), None, &track)
        .await
        .expect("track again");
    assert_eq!(
        again
            .headers()
            .get("Idempotent-Replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    assert_eq!(again.data.event, first.data.event);

    // Confirmed opt-in: with the public key, a new contact's subscription waits for the
    // confirmation mailed to it.
    let settings = session
        .update_project(
            &project.id,
            &types::UpdateProject {
                double_opt_in: Some(types::DoubleOptInMode::PublicKey),
                default_from: Some(types::MailboxBody {
                    email: "news@client-flow.test".into(),
                    name: None,
                }),
                confirmation_template_id: None,
                name: None,
                track_clicks: None,
                track_opens: None,
                transport: None,
            },
        )
        .await
        .expect("turn confirmed opt-in on")
        .into_inner();
    assert_eq!(settings.double_opt_in, types::DoubleOptInMode::PublicKey);
    let tracked = pk
        .track(
            None,
            None,
            &types::TrackRequest {
                email: "pending@example.com".into(),
                event: "signed-up".into(),
                data: None,
                subscribed: None,
                topics: None,
            },
        )
        .await
        .expect("track a subscription")
        .into_inner();
    let pending = sk
        .get_contact(&tracked.data.contact, None)
        .await
        .expect("get the pending contact")
        .into_inner();
    assert!(pending.subscription_pending && !pending.subscribed);
    assert!(pending.pending_since.is_some());

    // A sending domain, its records; then a send to two recipients from it, both emails read.
    let domain = sk
        .create_domain(
            None,
            &types::CreateDomain {
                domain: "client-flow.test".into(),
                allow_subdomains: None,
                dkim_ed25519: Some(true),
                inbound: None,
            },
        )
        .await
        .expect("create domain");
    assert_eq!(domain.status().as_u16(), 201);
    let domain = sk.get_domain(&domain.id, None).await.expect("get domain");
    assert!(!domain.records.is_empty());
    // Dual-signing with Ed25519: a selector of its own, which the generated type reads as
    // nullable.
    assert!(domain.dkim_ed25519);
    assert!(
        domain
            .dkim_ed25519_selector
            .as_deref()
            .is_some_and(|s| s.ends_with("-ed25519"))
    );
    let sent = sk
        .send(
            None,
            None,
            &types::SendRequest {
                to: types::SendRequestTo::Array(vec![
                    types::SendRequestToArrayItem::String("c1@example.com".into()),
                    types::SendRequestToArrayItem::MailboxBody(types::MailboxBody {
                        email: "c2@example.com".into(),
                        name: Some("C Two".into()),
                    }),
                ]),
                from: Some(types::SendRequestFrom::String(
                    "hello@client-flow.test".into(),
                )),
                subject: Some("Hello {{email}}".into()),
                body: Some("<p>Hi</p>".into()),
                attachments: None,
                data: None,
                headers: None,
                name: None,
                reply: None,
                subscribed: None,
                template: None,
                topics: None,
            },
        )
        .await
        .expect("send")
        .into_inner();
    assert_eq!(sent.data.emails.len(), 2);
    for e in &sent.data.emails {
        sk.get_email(&e.email, None).await.expect("get email");
    }

    // Templates: create (with a French variant), read, list, change, duplicate, delete.
    let french = types::LocaleVariant {
        subject: "Salut".into(),
        body: "<p>Salut {{email}}</p>".into(),
    };
    let template = sk
        .create_template(
            None,
            &types::CreateTemplate {
                name: "Welcome".into(),
                subject: "Hi".into(),
                body: "<p>Hi {{email}}</p>".into(),
                type_: types::TemplateKind::Transactional,
                from: None,
                from_name: None,
                reply_to: None,
                variants: Some([("fr".to_string(), french)].into_iter().collect()),
                topic_id: None,
            },
        )
        .await
        .expect("create template");
    assert_eq!(template.status().as_u16(), 201);
    let template = template.into_inner();
    let read = sk
        .get_template(&template.id, None)
        .await
        .expect("get template");
    assert_eq!(read.variants["fr"].subject, "Salut");
    let listed = sk
        .list_templates(None, None, None, None)
        .await
        .expect("list templates");
    assert!(listed.data.iter().any(|t| t.id == template.id));
    let renamed = sk
        .update_template(
            &template.id,
            None,
            &types::UpdateTemplate {
                name: Some("Welcome 2".into()),
                body: None,
                from: None,
                from_name: None,
                reply_to: None,
                subject: None,
                type_: None,
                variants: None,
                topic_id: None,
            },
        )
        .await
        .expect("update template");
    assert_eq!(renamed.name, "Welcome 2");
    let copy = sk
        .duplicate_template(&template.id, None)
        .await
        .expect("duplicate template");
    for id in [&copy.id, &template.id] {
        let deleted = sk.delete_template(id, None).await.expect("delete template");
        assert_eq!(deleted.status().as_u16(), 204);
    }

    // An address check and the activity feed.
    sk.verify_email(
        None,
        &types::VerifyRequest {
            email: "ann@example.com".into(),
        },
    )
    .await
    .expect("verify");
    sk.activity(None, None, None, None).await.expect("activity");
    sk.activity_stats(std::num::NonZeroU32::new(7), None)
        .await
        .expect("activity stats");

    // A campaign with an A/B test: created, read back with its test, and its stats per variant.
    let variant = |label: &str| types::CampaignVariant {
        subject: format!("Variant {label}"),
        body: format!("<p>{label}</p>"),
        from_name: None,
    };
    let created = sk
        .create_campaign(
            None,
            &types::CampaignRequest {
                name: "Duel".into(),
                description: None,
                subject: "Sale".into(),
                body: "<p>Sale</p>".into(),
                from: "news@acme.test".into(),
                from_name: None,
                reply_to: None,
                audience_type: types::AudienceType::All,
                segment_id: None,
                audience_filter: None,
                variants: Some(vec![variant("A"), variant("B")]),
                locale_variants: None,
                topic_id: None,
                test_fraction: Some(0.2),
                winner_metric: Some(types::AbWinnerMetric::ClickRate),
                test_duration: Some(3600),
            },
        )
        .await
        .expect("create campaign")
        .into_inner();
    let campaign = sk
        .get_campaign(&created.data.id, None)
        .await
        .expect("get campaign")
        .into_inner();
    let test = campaign.ab_test.expect("an A/B test");
    assert_eq!(test.status, types::AbTestStatus::Pending);
    assert_eq!(test.variants.len(), 2);
    assert_eq!(test.winner_metric, types::AbWinnerMetric::ClickRate);
    assert_eq!(test.test_duration, 3600);
    let stats = sk
        .campaign_stats(&created.data.id, None)
        .await
        .expect("campaign stats")
        .into_inner();
    assert_eq!(stats.variants.len(), 2);
    assert!(!stats.variants[1].winner);

    // Errors decode as the typed error bodies.
    let (status, missing) = refused(
        sk.get_contact("con_0123456789abcdef0123456789abcdef", None)
            .await,
    );
    assert_eq!((status, missing.error.code.as_str()), (404, "NOT_FOUND"));
    let (status, invalid) = refused(
        sk.upsert_contact(
            None,
            &types::CreateContact {
                email: "nope".into(),
                data: None,
                subscribed: None,
                topics: None,
            },
        )
        .await,
    );
    assert_eq!(
        (status, invalid.error.code.as_str()),
        (422, "VALIDATION_ERROR")
    );
    let fields: Vec<&str> = invalid
        .error
        .errors
        .iter()
        .map(|e| e.field.as_str())
        .collect();
    assert_eq!(fields, ["email"]);
    let (status, bad_send) = refused(
        sk.send(
            None,
            None,
            &types::SendRequest {
                to: types::SendRequestTo::String("nope".into()),
                from: None,
                subject: Some("s".into()),
                body: Some("b".into()),
                attachments: None,
                data: None,
                headers: None,
                name: None,
                reply: None,
                subscribed: None,
                template: None,
                topics: None,
            },
        )
        .await,
    );
    assert_eq!((status, bad_send.error.as_str()), (422, "VALIDATION_ERROR"));

    server.stop().await.expect("clean stop");
}
