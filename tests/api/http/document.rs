//! Every operation of the served OpenAPI document, walked against the real server: each is
//! called without credentials, with the project's secret key and with a member's dashboard
//! session (path parameters well-formed but unknown, JSON bodies empty), and each answer must be
//! one the document declares for that operation: its status, its content type, and a JSON body
//! that validates against the declared schema (required fields present, types as declared,
//! `null` only where `nullable`, times in `date-time` form). schemathesis (`.ci/schemathesis`)
//! goes further with generated inputs; this walk runs with the suite on both databases and names
//! the operation and the field that drift.

use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::support::harness::TestApp;

/// A value for a path parameter: well-formed where the server checks a form, unknown to it.
fn placeholder(name: &str) -> &'static str {
    match name {
        "id" | "contactId" | "projectId" | "executionId" | "stepId" | "jobId" | "transitionId"
        | "userId" => "zz_0123456789abcdef0123456789abcdef",
        "eventName" => "never-tracked",
        "field" => "plan",
        "provider" => "nowhere",
        _ => "x",
    }
}

/// The schema `schema` points to, through `$ref`s.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => schema,
    }
}

/// Whether `schema` (or what it refers to or wraps) allows `null`.
fn nullable(doc: &Value, schema: &Value) -> bool {
    let s = resolve(doc, schema);
    s.get("nullable") == Some(&Value::Bool(true))
        || schema.get("nullable") == Some(&Value::Bool(true))
        || ["allOf", "oneOf", "anyOf"].iter().any(|k| {
            s.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|list| list.iter().any(|x| nullable(doc, x)))
        })
}

/// Every way `value` departs from `schema`, each with its path.
fn check(doc: &Value, schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    if value.is_null() {
        if !nullable(doc, schema) {
            problems.push(format!("{path}: null, but not declared nullable"));
        }
        return;
    }
    let s = resolve(doc, schema);
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for part in all {
            check(doc, part, value, path, problems);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = s.get(key).and_then(Value::as_array) {
            let fits = options.iter().any(|o| {
                let mut p = Vec::new();
                check(doc, o, value, path, &mut p);
                p.is_empty()
            });
            if !fits {
                problems.push(format!("{path}: fits none of its {key} forms: {value}"));
            }
        }
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {options:?}"));
    }
    let Some(kind) = s.get("type").and_then(Value::as_str) else {
        return;
    };
    let fits = match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    };
    if !fits {
        problems.push(format!("{path}: {value} is not a {kind}"));
        return;
    }
    match kind {
        "string" if s.get("format").and_then(Value::as_str) == Some("date-time") => {
            let text = value.as_str().unwrap_or_default();
            if chrono::DateTime::parse_from_rfc3339(text).is_err() {
                problems.push(format!("{path}: `{text}` is not a date-time"));
            }
        }
        "array" => {
            if let Some(items) = s.get("items") {
                for (i, item) in value.as_array().unwrap().iter().enumerate() {
                    check(doc, items, item, &format!("{path}[{i}]"), problems);
                }
            }
        }
        "object" => {
            let object = value.as_object().unwrap();
            let empty = Map::new();
            let properties = s
                .get("properties")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            for required in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !object.contains_key(required) {
                    problems.push(format!("{path}.{required}: required, but absent"));
                }
            }
            for (key, v) in object {
                match properties.get(key) {
                    Some(p) => check(doc, p, v, &format!("{path}.{key}"), problems),
                    None => {
                        if let Some(extra) = s.get("additionalProperties").filter(|a| a.is_object())
                        {
                            check(doc, extra, v, &format!("{path}.{key}"), problems);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// How a walk authenticates.
#[derive(Clone, Copy, Debug)]
enum Caller {
    Nobody,
    SecretKey,
    Session,
}

#[tokio::test]
async fn every_operation_answers_only_what_the_document_declares() {
    let app = TestApp::spawn_with(|s| s.rate_limit_per_minute = 1_000_000).await;
    let p = app.project().await;
    let doc = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    // A member's session: a second client that keeps the cookie of its own signup and project.
    let session = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let r = session
        .post(app.url("/auth/signup"))
        .json(&json!({ "email": "walker@example.com", "password": "a long enough password" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let created: Value = session
        .post(app.url("/users/@me/projects"))
        .json(&json!({ "name": "Walked" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session_project = created["id"].as_str().unwrap().to_string();
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let mut problems = Vec::new();
    let mut calls = 0;
    for (template, operations) in doc["paths"].as_object().unwrap() {
        let mut path = template.clone();
        for name in template
            .split('{')
            .skip(1)
            .filter_map(|s| s.split('}').next())
        {
            path = path.replace(&format!("{{{name}}}"), placeholder(name));
        }
        for (method, operation) in operations.as_object().unwrap() {
            let Ok(method) = method.to_ascii_uppercase().parse::<Method>() else {
                continue;
            };
            let body = operation["requestBody"]["content"]
                .as_object()
                .is_some_and(|c| c.contains_key("application/json"));
            for caller in [Caller::Nobody, Caller::SecretKey, Caller::Session] {
                // The walk's own session stays open.
                if matches!(caller, Caller::Session) && template == "/auth/logout" {
                    continue;
                }
                let client = if matches!(caller, Caller::Session) {
                    &session
                } else {
                    &plain
                };
                let mut request = client.request(method.clone(), app.url(&path));
                match caller {
                    Caller::Nobody => {}
                    Caller::SecretKey => request = request.bearer_auth(&p.secret_key),
                    Caller::Session => request = request.header("X-Project-Id", &session_project),
                }
                if body {
                    request = request.json(&json!({}));
                }
                let response = request.send().await.unwrap();
                calls += 1;
                let status = response.status().as_u16();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                let text = response.text().await.unwrap();
                let at = format!("{method} {template} ({caller:?}) -> {status}");
                let declared = &operation["responses"][status.to_string()];
                let declared = if declared.is_null() {
                    &operation["responses"]["default"]
                } else {
                    declared
                };
                if declared.is_null() {
                    problems.push(format!("{at}: status not declared ({text:.200})"));
                    continue;
                }
                let Some(contents) = declared["content"].as_object() else {
                    if !text.is_empty() {
                        problems.push(format!("{at}: a body where none is declared"));
                    }
                    continue;
                };
                if text.is_empty() && content_type.is_empty() {
                    continue;
                }
                // Declared media types may carry parameters (`; charset=utf-8`).
                let content = contents
                    .iter()
                    .find(|(declared, _)| {
                        declared.split(';').next().unwrap_or_default().trim() == content_type
                    })
                    .map(|(_, c)| c)
                    .or_else(|| contents.get("*/*"));
                let Some(content) = content else {
                    problems.push(format!(
                        "{at}: content type `{content_type}` not declared ({:?})",
                        contents.keys().collect::<Vec<_>>()
                    ));
                    continue;
                };
                if content_type == "application/json" {
                    match serde_json::from_str::<Value>(&text) {
                        Ok(value) => check(&doc, &content["schema"], &value, &at, &mut problems),
                        Err(e) => problems.push(format!("{at}: not JSON ({e})")),
                    }
                }
            }
        }
    }
    assert!(
        calls > 300,
        "only {calls} calls: the walk found too few operations"
    );
    assert!(
        problems.is_empty(),
        "{} answers the document does not declare:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_walks_check_refuses_what_the_schema_does_not_allow() {
    let doc = json!({ "components": { "schemas": {
        "Page": { "type": "object", "required": ["data", "cursor"], "properties": {
            "data": { "type": "array", "items": { "$ref": "#/components/schemas/Item" } },
            "cursor": { "type": "string", "nullable": true } } },
        "Item": { "type": "object", "required": ["at"], "properties": {
            "at": { "type": "string", "format": "date-time" },
            "kind": { "type": "string", "enum": ["A", "B"] },
            "count": { "type": "integer" } } } } } });
    let page = json!({ "$ref": "#/components/schemas/Page" });
    let mut problems = Vec::new();
    check(
        &doc,
        &page,
        &json!({ "data": [ { "at": "2026-11-25T03:00:00Z", "kind": "A", "count": 2 } ], "cursor": null }),
        "ok",
        &mut problems,
    );
    assert!(problems.is_empty(), "{problems:?}");
    check(
        &doc,
        &page,
        &json!({ "data": [ { "at": "yesterday", "kind": "C", "count": 1.5 }, { "count": null } ] }),
        "bad",
        &mut problems,
    );
    assert_eq!(
        problems,
        [
            "bad.cursor: required, but absent",
            "bad.data[0].at: `yesterday` is not a date-time",
            "bad.data[0].kind: \"C\" is not one of [String(\"A\"), String(\"B\")]",
            "bad.data[0].count: 1.5 is not a integer",
            "bad.data[1].at: required, but absent",
            "bad.data[1].count: null, but not declared nullable",
        ]
        .map(String::from)
    );
}

/// The property `name` of the request or response schema `schema` of the document.
fn property<'a>(doc: &'a Value, schema: &str, name: &str) -> &'a Value {
    let s = &doc["components"]["schemas"][schema]["properties"][name];
    assert!(!s.is_null(), "{schema}.{name} is not in the document");
    resolve(doc, s)
}

/// The spec's "email format", its enumerations, its batch limits and its path parameter names,
/// as the document declares them (so that generated clients check them before a call).
#[test]
fn the_document_declares_the_specs_formats_enums_limits_and_names() {
    let doc: Value = serde_json::from_str(&herald::api::openapi_json()).unwrap();
    for (schema, field) in [
        ("CreateContact", "email"),
        ("UpdateContact", "email"),
        ("ContactBody", "email"),
        ("CampaignRequest", "from"),
        ("CampaignRequest", "replyTo"),
        ("CampaignBody", "from"),
        ("CampaignBody", "replyTo"),
        ("SendRequest", "reply"),
        ("MailboxBody", "email"),
        ("VerifyRequest", "email"),
    ] {
        let s = property(&doc, schema, field);
        assert_eq!(s["format"], "email", "{schema}.{field}: {s}");
    }
    for (schema, field, values) in [
        (
            "CampaignRequest",
            "audienceType",
            json!(["ALL", "SEGMENT", "FILTERED"]),
        ),
        ("CreateSegment", "type", json!(["DYNAMIC", "STATIC"])),
        (
            "CreateTemplate",
            "type",
            json!(["TRANSACTIONAL", "MARKETING"]),
        ),
        (
            "UpdateTemplate",
            "type",
            json!(["TRANSACTIONAL", "MARKETING"]),
        ),
    ] {
        let s = property(&doc, schema, field);
        assert_eq!(s["enum"], values, "{schema}.{field}: {s}");
    }
    for (schema, field, max) in [
        ("LookupRequest", "emails", 500),
        ("BulkRequest", "contactIds", 1000),
        ("AddMembers", "emails", 1000),
        ("RemoveMembers", "emails", 1000),
    ] {
        let s = property(&doc, schema, field);
        assert_eq!(s["maxItems"], max, "{schema}.{field}: {s}");
    }
    let members = &doc["paths"]["/projects/{id}/members/{userId}"];
    for method in ["patch", "delete"] {
        let names: Vec<&str> = members[method]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{method} /projects/{{id}}/members/{{userId}}"))
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"userId"), "{method}: {names:?}");
    }
    let list = &doc["paths"]["/segments"]["get"]["responses"]["200"]["content"];
    let list = list.as_object().unwrap().values().next().unwrap();
    assert_eq!(list["schema"]["type"], "array", "GET /segments: {list}");
}
