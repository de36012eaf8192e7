//! `Store::usage` over workflows, on the database under test: triggers, `WAIT_FOR_EVENT`,
//! `CONDITION`, `UPDATE_CONTACT` and `SEND_EMAIL` steps each reference what their config names,
//! with the step's id; another project's workflows never show. The workflow rows are written
//! with plain SQL, as the workflows API would store them (segments are covered through HTTP in
//! `http/segments.rs`).

use herald::domain::ids::ProjectId;
use herald::store::usage::{UsageOf, UsageRef};
use herald::store::{Db, Store};
use herald_filter::Field;
use serde_json::{Value, json};

use crate::support::harness::store_with_project;

async fn execute(store: &Store, sql: &str) {
    match store.db() {
        Db::Sqlite { writer, .. } => sqlx::query(sql).execute(writer).await.map(|_| ()),
        Db::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(|_| ()),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn workflow(store: &Store, project: &ProjectId, id: &str, name: &str, trigger: &str) {
    execute(
        store,
        &format!(
            "INSERT INTO workflows (id, project_id, name, trigger_type, trigger_event, enabled, \
             allow_reentry, created_at, updated_at) \
             VALUES ('{id}', '{project}', '{name}', 'EVENT', '{trigger}', FALSE, FALSE, 1, 1)"
        ),
    )
    .await;
}

async fn step(
    store: &Store,
    project: &ProjectId,
    workflow: &str,
    id: &str,
    kind: &str,
    config: Value,
) {
    execute(
        store,
        &format!(
            "INSERT INTO workflow_steps (id, workflow_id, project_id, type, config, created_at, \
             updated_at) VALUES ('{id}', '{workflow}', '{project}', '{kind}', '{config}', 1, 1)"
        ),
    )
    .await;
}

fn refs(list: &[UsageRef]) -> Vec<(String, Option<String>)> {
    list.iter()
        .map(|r| (r.id.clone(), r.step_id.clone()))
        .collect()
}

fn at(workflow: &str, step: Option<&str>) -> (String, Option<String>) {
    (workflow.to_string(), step.map(str::to_string))
}

fn data(path: &str) -> Field {
    Field::Data(path.split('.').map(str::to_string).collect())
}

#[tokio::test]
async fn workflows_reference_their_trigger_and_what_their_steps_name() {
    let dir = tempfile::tempdir().unwrap();
    let (store, project) = store_with_project(dir.path()).await;
    let condition = json!({ "filter": { "logic": "AND", "groups": [ { "filters": [
        { "field": "event.paid", "operator": "triggeredWithin", "value": 2, "unit": "days" },
        { "field": "event.data.amount", "operator": "greaterThan", "value": 10 },
        { "field": "data.plan.tier", "operator": "equals", "value": "gold" } ] } ] } });

    // wf_a (older): triggered by `signup`; waits for `paid`, checks a condition, sends tpl_1.
    workflow(&store, &project, "wf_a", "Onboarding", "signup").await;
    step(
        &store,
        &project,
        "wf_a",
        "stp_a1",
        "WAIT_FOR_EVENT",
        json!({ "eventName": "paid" }),
    )
    .await;
    step(&store, &project, "wf_a", "stp_a2", "CONDITION", condition).await;
    step(
        &store,
        &project,
        "wf_a",
        "stp_a3",
        "SEND_EMAIL",
        json!({ "templateId": "tpl_1" }),
    )
    .await;
    // wf_b (newer): triggered by `paid`; updates the contact and sends tpl_1 again.
    workflow(&store, &project, "wf_b", "Upsell", "paid").await;
    step(
        &store,
        &project,
        "wf_b",
        "stp_b1",
        "UPDATE_CONTACT",
        json!({ "data": { "plan": "pro" }, "subscribed": true }),
    )
    .await;
    step(
        &store,
        &project,
        "wf_b",
        "stp_b2",
        "SEND_EMAIL",
        json!({ "templateId": "tpl_1" }),
    )
    .await;
    step(
        &store,
        &project,
        "wf_b",
        "stp_b3",
        "DELAY",
        json!({ "amount": 1, "unit": "days" }),
    )
    .await;
    // wf_c: no steps, an unrelated trigger.
    workflow(&store, &project, "wf_c", "Empty", "other").await;

    let paid = store.usage(&project, UsageOf::Event("paid")).await.unwrap();
    assert_eq!(
        refs(&paid.workflows),
        [
            at("wf_b", None),
            at("wf_a", Some("stp_a1")),
            at("wf_a", Some("stp_a2"))
        ]
    );
    assert_eq!(paid.workflows[0].name, "Upsell");
    assert!(paid.segments.is_empty() && paid.campaigns.is_empty());
    assert_eq!(
        refs(
            &store
                .usage(&project, UsageOf::Event("signup"))
                .await
                .unwrap()
                .workflows
        ),
        [at("wf_a", None)]
    );
    assert!(
        store
            .usage(&project, UsageOf::Event("amount"))
            .await
            .unwrap()
            .workflows
            .is_empty()
    );

    let template = store
        .usage(&project, UsageOf::Template("tpl_1"))
        .await
        .unwrap();
    assert_eq!(
        refs(&template.workflows),
        [at("wf_b", Some("stp_b2")), at("wf_a", Some("stp_a3"))]
    );
    assert!(
        store
            .usage(&project, UsageOf::Template("tpl_2"))
            .await
            .unwrap()
            .workflows
            .is_empty()
    );

    let plan = store
        .usage(&project, UsageOf::Field(&data("plan")))
        .await
        .unwrap();
    assert_eq!(
        refs(&plan.workflows),
        [at("wf_b", Some("stp_b1")), at("wf_a", Some("stp_a2"))]
    );
    let tier = store
        .usage(&project, UsageOf::Field(&data("plan.tier")))
        .await
        .unwrap();
    assert_eq!(refs(&tier.workflows), [at("wf_a", Some("stp_a2"))]);
    let subscribed = store
        .usage(&project, UsageOf::Field(&Field::Subscribed))
        .await
        .unwrap();
    assert_eq!(refs(&subscribed.workflows), [at("wf_b", Some("stp_b1"))]);
    assert!(
        store
            .usage(&project, UsageOf::Field(&Field::Email))
            .await
            .unwrap()
            .workflows
            .is_empty()
    );

    // Another project sees none of it.
    let other = store
        .create_project(
            &herald::domain::project::ProjectName::parse("q").unwrap(),
            &store
                .create_user(
                    &herald::domain::email::EmailAddress::parse("q@example.com").unwrap(),
                    "x",
                )
                .await
                .unwrap()
                .id,
            &herald::domain::keys::KeyPair::generate(),
        )
        .await
        .unwrap()
        .id;
    let usage = store.usage(&other, UsageOf::Event("paid")).await.unwrap();
    assert!(usage.workflows.is_empty(), "{usage:?}");
}
