//! The seven built-in steps through the runtime, with good and bad configs.

use herald::plugins::{Effect, FieldError, Outcome, Plugins};
use serde_json::{Value, json};

use super::{input, now_ms, start};

async fn errors(plugins: &Plugins, step: &str, config: Value) -> Vec<FieldError> {
    plugins
        .validate_step(step, &config)
        .await
        .expect("validate runs")
}

fn fields(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|e| e.field.as_str()).collect()
}

#[tokio::test]
async fn send_email_asks_the_host_to_send() {
    let (plugins, _dir) = start(|_| {});
    let config = json!({ "templateId": "tpl_welcome" });
    assert!(
        errors(&plugins, "SEND_EMAIL", config.clone())
            .await
            .is_empty()
    );
    let result = plugins
        .run_step("SEND_EMAIL", &input(config))
        .await
        .unwrap();
    assert_eq!(result.outcome, Outcome::Continue { branch: None });
    assert_eq!(
        result.effects,
        vec![Effect::SendEmail {
            template_id: "tpl_welcome".into(),
            to: None,
            topic_id: None
        }]
    );

    let to = json!({ "templateId": "tpl_alert", "to": "ops@example.org" });
    assert!(errors(&plugins, "SEND_EMAIL", to.clone()).await.is_empty());
    let result = plugins.run_step("SEND_EMAIL", &input(to)).await.unwrap();
    assert_eq!(
        result.effects,
        vec![Effect::SendEmail {
            template_id: "tpl_alert".into(),
            to: Some("ops@example.org".into()),
            topic_id: None
        }]
    );
    let contact = json!({ "templateId": "t", "to": "contact" });
    let result = plugins
        .run_step("SEND_EMAIL", &input(contact))
        .await
        .unwrap();
    assert_eq!(
        result.effects,
        vec![Effect::SendEmail {
            template_id: "t".into(),
            to: None,
            topic_id: None
        }]
    );

    // `topicId` is checked for its form; the host reads it from the config itself.
    let topic = json!({ "templateId": "t", "topicId": "top_1" });
    assert!(errors(&plugins, "SEND_EMAIL", topic).await.is_empty());
    let topic = json!({ "templateId": "t", "topicId": "news" });
    assert_eq!(
        fields(&errors(&plugins, "SEND_EMAIL", topic).await),
        ["topicId"]
    );

    let missing = errors(&plugins, "SEND_EMAIL", json!({})).await;
    assert_eq!(fields(&missing), ["templateId"]);
    assert_eq!(missing[0].message, "is required");
    let bad = errors(
        &plugins,
        "SEND_EMAIL",
        json!({ "templateId": " ", "to": "nobody" }),
    )
    .await;
    assert_eq!(fields(&bad), ["templateId", "to"]);
    let wrong_type = errors(&plugins, "SEND_EMAIL", json!({ "templateId": 5 })).await;
    assert_eq!(fields(&wrong_type), ["templateId"]);
    let unknown = errors(
        &plugins,
        "SEND_EMAIL",
        json!({ "templateId": "t", "cc": "x" }),
    )
    .await;
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert!(unknown[0].message.contains("unknown field"), "{unknown:?}");
    let not_object = errors(&plugins, "SEND_EMAIL", json!("tpl")).await;
    assert_eq!(fields(&not_object), ["config"]);

    // Running with a bad config fails the step (it does not crash anything).
    let result = plugins
        .run_step("SEND_EMAIL", &input(json!({})))
        .await
        .unwrap();
    assert!(
        matches!(result.outcome, Outcome::Fail { ref message } if message.contains("templateId"))
    );
    assert!(result.effects.is_empty());
}

#[tokio::test]
async fn delay_waits_until_now_plus_the_amount() {
    let (plugins, _dir) = start(|_| {});
    for (amount, unit, ms) in [
        (2, "hours", 7_200_000i64),
        (15, "minutes", 900_000),
        (365, "days", 365 * 86_400_000),
    ] {
        let config = json!({ "amount": amount, "unit": unit });
        assert!(errors(&plugins, "DELAY", config.clone()).await.is_empty());
        let before = now_ms();
        let result = plugins.run_step("DELAY", &input(config)).await.unwrap();
        let after = now_ms();
        let Outcome::WaitUntil { at } = result.outcome else {
            panic!("{:?}", result.outcome)
        };
        assert!(
            at >= before + ms && at <= after + ms,
            "{at} for {amount} {unit}"
        );
        assert!(result.effects.is_empty());
    }
    // A delay of 0 continues at once, through the queue.
    assert!(
        errors(&plugins, "DELAY", json!({ "amount": 0, "unit": "days" }))
            .await
            .is_empty()
    );
    let too_long = errors(&plugins, "DELAY", json!({ "amount": 366, "unit": "days" })).await;
    assert_eq!(fields(&too_long), ["amount"]);
    assert!(too_long[0].message.contains("365 days"));
    assert_eq!(
        fields(&errors(&plugins, "DELAY", json!({ "amount": 1, "unit": "weeks" })).await),
        ["unit"]
    );
    assert_eq!(
        fields(&errors(&plugins, "DELAY", json!({ "amount": -1, "unit": "days" })).await),
        ["amount"]
    );
    assert_eq!(
        fields(&errors(&plugins, "DELAY", json!({ "unit": "days" })).await),
        ["amount"]
    );
}

#[tokio::test]
async fn wait_for_event_waits_with_an_optional_timeout() {
    let (plugins, _dir) = start(|_| {});
    let config = json!({ "eventName": "purchase", "timeoutSeconds": 3600 });
    assert!(
        errors(&plugins, "WAIT_FOR_EVENT", config.clone())
            .await
            .is_empty()
    );
    let before = now_ms();
    let result = plugins
        .run_step("WAIT_FOR_EVENT", &input(config))
        .await
        .unwrap();
    let Outcome::WaitForEvent {
        event_name,
        timeout_at: Some(at),
    } = result.outcome
    else {
        panic!("{:?}", result.outcome)
    };
    assert_eq!(event_name, "purchase");
    assert!(at >= before + 3_600_000 && at <= now_ms() + 3_600_000);

    let forever = plugins
        .run_step("WAIT_FOR_EVENT", &input(json!({ "eventName": "reply" })))
        .await
        .unwrap();
    assert_eq!(
        forever.outcome,
        Outcome::WaitForEvent {
            event_name: "reply".into(),
            timeout_at: None
        }
    );

    assert_eq!(
        fields(&errors(&plugins, "WAIT_FOR_EVENT", json!({ "eventName": "" })).await),
        ["eventName"]
    );
    assert_eq!(
        fields(
            &errors(
                &plugins,
                "WAIT_FOR_EVENT",
                json!({ "eventName": "x", "timeoutSeconds": 0 })
            )
            .await
        ),
        ["timeoutSeconds"]
    );
    assert_eq!(
        fields(
            &errors(
                &plugins,
                "WAIT_FOR_EVENT",
                json!({ "eventName": "x", "timeoutSeconds": "soon" })
            )
            .await
        ),
        ["timeoutSeconds"]
    );
    assert_eq!(
        fields(&errors(&plugins, "WAIT_FOR_EVENT", json!({})).await),
        ["eventName"]
    );
}

fn one(field: &str, operator: &str, value: Value) -> Value {
    json!({ "logic": "AND", "groups": [{ "filters": [{ "field": field, "operator": operator, "value": value }] }] })
}

#[tokio::test]
async fn condition_branches_on_the_filter_language() {
    let (plugins, _dir) = start(|_| {});
    let cases: Vec<(Value, &str)> = vec![
        (one("data.tier", "equals", json!("gold")), "yes"),
        (one("data.tier", "notEquals", json!("gold")), "no"),
        (one("data.profile.city", "equals", json!("Paris")), "yes"),
        (one("data.age", "greaterThan", json!(18)), "yes"),
        (one("data.age", "lessThanOrEqual", json!("29")), "no"),
        (one("data.tags", "contains", json!("b")), "yes"),
        (one("data.tier", "contains", json!("OL")), "yes"),
        (one("data.missing", "exists", Value::Null), "no"),
        (one("data.missing", "notExists", Value::Null), "yes"),
        (
            one("data.renewal", "greaterThan", json!("2029-12-31")),
            "yes",
        ),
        (one("email", "equals", json!("ADA@example.com")), "yes"),
        (one("email", "notContains", json!("example")), "no"),
        (one("subscribed", "equals", json!(true)), "yes"),
        (one("event.data.plan", "equals", json!("pro")), "yes"),
        (
            one("event.data.seats", "greaterThanOrEqual", json!(4)),
            "no",
        ),
        (one("context.score", "lessThan", json!(10)), "yes"),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "createdAt", "operator": "within", "value": 1, "unit": "days" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "createdAt", "operator": "olderThan", "value": 1, "unit": "hours" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "event.purchase", "operator": "triggered" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "event.refund", "operator": "notTriggered" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "event.purchase", "operator": "triggeredWithin", "value": 30, "unit": "minutes" }] }] }),
            "no",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "event.purchase", "operator": "notTriggeredWithin", "value": 30, "unit": "minutes" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "segment.seg_vip", "operator": "memberOf" }] }] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "segment.seg_vip", "operator": "notMemberOf" }] }] }),
            "no",
        ),
        // OR of groups; AND inside a group; nested conditions.
        (
            json!({ "logic": "OR", "groups": [
            { "filters": [{ "field": "data.tier", "operator": "equals", "value": "silver" }] },
            { "filters": [{ "field": "data.age", "operator": "equals", "value": 30 }] }
        ] }),
            "yes",
        ),
        (
            json!({ "logic": "AND", "groups": [
            { "filters": [{ "field": "data.tier", "operator": "equals", "value": "gold" },
                          { "field": "data.age", "operator": "lessThan", "value": 20 }] }
        ] }),
            "no",
        ),
        (
            json!({ "logic": "AND", "groups": [
            { "filters": [{ "field": "data.tier", "operator": "equals", "value": "gold" }],
              "conditions": { "logic": "OR", "groups": [
                  { "filters": [{ "field": "context.score", "operator": "equals", "value": 1 }] },
                  { "filters": [{ "field": "event.data.plan", "operator": "equals", "value": "pro" }] }
              ] } }
        ] }),
            "yes",
        ),
    ];
    for (filter, expected) in cases {
        let config = json!({ "filter": filter });
        let errs = errors(&plugins, "CONDITION", config.clone()).await;
        assert!(errs.is_empty(), "{filter}: {errs:?}");
        let result = plugins.run_step("CONDITION", &input(config)).await.unwrap();
        assert_eq!(
            result.outcome,
            Outcome::Continue {
                branch: Some(expected.into())
            },
            "{filter}"
        );
    }
}

#[tokio::test]
async fn condition_reports_bad_filters_with_their_path() {
    let (plugins, _dir) = start(|_| {});
    let check = |filter: Value| {
        let plugins = &plugins;
        async move { errors(plugins, "CONDITION", json!({ "filter": filter })).await }
    };
    let bad = check(json!({ "logic": "XOR", "groups": [] })).await;
    assert_eq!(fields(&bad), ["filter.logic", "filter.groups"]);
    let bad = check(json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": "data.tier", "operator": "equals", "value": "gold" },
        { "field": "data.tier", "operator": "sortOf", "value": "x" },
        { "field": "nickname", "operator": "equals", "value": "x" },
        { "field": "data.tier", "operator": "equals" },
        { "field": "createdAt", "operator": "within", "value": 3 },
        { "field": "data.tier", "operator": "triggered" },
        { "field": "event.signup", "operator": "equals", "value": 1 },
        { "field": "segment.s1", "operator": "exists" }
    ] }] }))
    .await;
    assert_eq!(
        fields(&bad),
        [
            "filter.groups[0].filters[1].operator",
            "filter.groups[0].filters[2].field",
            "filter.groups[0].filters[3].value",
            "filter.groups[0].filters[4].unit",
            "filter.groups[0].filters[5].operator",
            "filter.groups[0].filters[6].operator",
            "filter.groups[0].filters[7].operator",
        ]
    );
    let nested = check(json!({ "logic": "AND", "groups": [{ "filters": [], "conditions": { "logic": "AND", "groups": [{ "filters": [{ "field": "data.x", "operator": "nope", "value": 1 }] }] } }] })).await;
    assert_eq!(
        fields(&nested),
        ["filter.groups[0].conditions.groups[0].filters[0].operator"]
    );
    assert_eq!(
        fields(&errors(&plugins, "CONDITION", json!({})).await),
        ["filter"]
    );
    assert_eq!(fields(&check(json!([1])).await), ["filter"]);
    let result = plugins
        .run_step("CONDITION", &input(json!({ "filter": { "logic": "AND" } })))
        .await
        .unwrap();
    assert!(matches!(result.outcome, Outcome::Fail { .. }), "{result:?}");
}

#[tokio::test]
async fn webhook_calls_the_url_and_keeps_the_answer() {
    let (addr, seen) =
        crate::support::httpd::http_server("200 OK", String::new(), r#"{"accepted":true}"#).await;
    let (plugins, _dir) = start(|s| s.webhook_allow_private = true);
    let url = format!("http://{addr}/hooks/herald");
    let config = json!({ "url": url, "headers": { "x-token": "t0k" } });
    assert!(errors(&plugins, "WEBHOOK", config.clone()).await.is_empty());
    let result = plugins.run_step("WEBHOOK", &input(config)).await.unwrap();
    assert_eq!(result.outcome, Outcome::Continue { branch: None });
    assert_eq!(
        result.effects,
        vec![Effect::SetContext {
            key: "webhook".into(),
            value: json!({ "status": 200, "body": { "accepted": true } })
        }]
    );
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0].head.starts_with("POST /hooks/herald HTTP/1.1"),
        "{}",
        requests[0].head
    );
    assert!(
        requests[0]
            .head
            .to_ascii_lowercase()
            .contains("x-token: t0k")
    );
    let sent: Value = serde_json::from_str(&requests[0].body).unwrap();
    assert_eq!(sent["contact"]["email"], "ada@example.com");
    assert_eq!(sent["event"]["name"], "signup");
    assert_eq!(sent["context"]["score"], 5);

    // A custom body and method.
    let config = json!({ "url": url, "method": "put", "body": { "hello": "world" } });
    plugins.run_step("WEBHOOK", &input(config)).await.unwrap();
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert!(last.head.starts_with("PUT "));
    assert_eq!(
        serde_json::from_str::<Value>(&last.body).unwrap(),
        json!({ "hello": "world" })
    );

    assert_eq!(
        fields(&errors(&plugins, "WEBHOOK", json!({ "url": "ftp://x.example" })).await),
        ["url"]
    );
    assert_eq!(
        fields(
            &errors(
                &plugins,
                "WEBHOOK",
                json!({ "url": url, "method": "TRACE" })
            )
            .await
        ),
        ["method"]
    );
    assert_eq!(
        fields(
            &errors(
                &plugins,
                "WEBHOOK",
                json!({ "url": url, "headers": { "bad header": "x" } })
            )
            .await
        ),
        ["headers.bad header"]
    );
    assert_eq!(
        fields(&errors(&plugins, "WEBHOOK", json!({})).await),
        ["url"]
    );
}

#[tokio::test]
async fn webhook_fails_on_an_error_status_and_on_private_addresses_by_default() {
    let (addr, _) =
        crate::support::httpd::http_server("500 Internal Server Error", String::new(), "{}").await;
    let (open, _dir) = start(|s| s.webhook_allow_private = true);
    let result = open
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://{addr}/") })),
        )
        .await
        .unwrap();
    assert_eq!(
        result.outcome,
        Outcome::Fail {
            message: "the webhook answered 500".into()
        }
    );

    // By default loopback is refused before any connection is made.
    let (closed, _dir2) = start(|_| {});
    let result = closed
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://{addr}/") })),
        )
        .await
        .unwrap();
    let Outcome::Fail { message } = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert!(message.contains("blocked address"), "{message}");
    // A host name that resolves to loopback is refused as well.
    let result = closed
        .run_step(
            "WEBHOOK",
            &input(json!({ "url": format!("http://localhost:{}/", addr.port()) })),
        )
        .await
        .unwrap();
    let Outcome::Fail { message } = result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert!(message.contains("blocked address"), "{message}");
}

#[tokio::test]
async fn update_contact_asks_the_host_to_change_the_contact() {
    let (plugins, _dir) = start(|_| {});
    let config = json!({ "data": { "plan": "pro", "score": 9 }, "subscribed": false });
    assert!(
        errors(&plugins, "UPDATE_CONTACT", config.clone())
            .await
            .is_empty()
    );
    let result = plugins
        .run_step("UPDATE_CONTACT", &input(config))
        .await
        .unwrap();
    assert_eq!(result.outcome, Outcome::Continue { branch: None });
    let Value::Object(data) = json!({ "plan": "pro", "score": 9 }) else {
        unreachable!()
    };
    assert_eq!(
        result.effects,
        vec![Effect::UpdateContact {
            data: Some(data),
            subscribed: Some(false)
        }]
    );

    let only = plugins
        .run_step("UPDATE_CONTACT", &input(json!({ "subscribed": true })))
        .await
        .unwrap();
    assert_eq!(
        only.effects,
        vec![Effect::UpdateContact {
            data: None,
            subscribed: Some(true)
        }]
    );

    assert_eq!(
        fields(&errors(&plugins, "UPDATE_CONTACT", json!({})).await),
        ["config"]
    );
    assert_eq!(
        fields(&errors(&plugins, "UPDATE_CONTACT", json!({ "data": 5 })).await),
        ["data"]
    );
    assert_eq!(
        fields(&errors(&plugins, "UPDATE_CONTACT", json!({ "data": { "": 1 } })).await),
        ["data"]
    );
    assert_eq!(
        fields(&errors(&plugins, "UPDATE_CONTACT", json!({ "subscribed": "yes" })).await),
        ["subscribed"]
    );
}

#[tokio::test]
async fn exit_ends_the_execution() {
    let (plugins, _dir) = start(|_| {});
    let result = plugins
        .run_step("EXIT", &input(json!({ "reason": "converted" })))
        .await
        .unwrap();
    assert_eq!(
        result.outcome,
        Outcome::Exit {
            reason: Some("converted".into())
        }
    );
    assert!(result.effects.is_empty());
    let result = plugins.run_step("EXIT", &input(json!({}))).await.unwrap();
    assert_eq!(result.outcome, Outcome::Exit { reason: None });
    assert_eq!(
        fields(&errors(&plugins, "EXIT", json!({ "reason": 5 })).await),
        ["reason"]
    );
}

#[tokio::test]
async fn unknown_step_types_and_plugins_are_clear_errors() {
    let (plugins, _dir) = start(|_| {});
    let err = plugins
        .run_step("TELEPORT", &input(json!({})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("TELEPORT"), "{err}");
    let errs = errors(&plugins, "PLUGIN", json!({ "plugin": "nope" })).await;
    assert_eq!(fields(&errs), ["plugin"]);
    // A transport is not a step.
    let errs = errors(&plugins, "PLUGIN", json!({ "plugin": "outbox" })).await;
    assert_eq!(fields(&errs), ["plugin"]);
    let err = plugins
        .run_step("PLUGIN", &input(json!({ "plugin": "outbox" })))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a `step` plugin"), "{err}");
}
