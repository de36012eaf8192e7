//! Teams: `/projects/:id/members` (list, add or invite, change roles, remove), invitations
//! accepted by signing up through the mailed link or, for an account that has not verified its
//! address, by accepting signed in, the limits of team mail, the last owner kept, and a matrix of
//! role × operation.

use reqwest::Method;
use serde_json::{Value, json};

use crate::http::accounts::{jar, mailed_token};
use crate::support::harness::{Reply, TestApp, TestProject};

async fn dashboard(
    app: &TestApp,
    client: &reqwest::Client,
    method: Method,
    path: &str,
    project: &str,
    body: Option<Value>,
) -> Reply {
    app.call_with(
        client,
        method,
        path,
        None,
        body,
        &[("X-Project-Id", project)],
    )
    .await
}

async fn invite(app: &TestApp, client: &reqwest::Client, p: &TestProject, body: Value) -> Reply {
    let path = format!("/projects/{}/members", p.id);
    dashboard(app, client, Method::POST, &path, &p.id, Some(body)).await
}

async fn user_id(app: &TestApp, client: &reqwest::Client) -> String {
    let me = app
        .call_with(client, Method::GET, "/users/@me", None, None, &[])
        .await;
    me.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn members_are_added_invited_changed_and_removed_and_the_last_owner_stays() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let owner = &p.owner;
    let owner_id = user_id(&app, owner).await;
    let members = format!("/projects/{}/members", p.id);

    // An address whose account verified it joins at once and is told by mail.
    let bob = app.verified_user("bob@example.com").await;
    let r = invite(
        &app,
        owner,
        &p,
        json!({ "email": "bob@example.com", "role": "admin" }),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["role"], "ADMIN");
    let bob_id = r.body["userId"].as_str().unwrap().to_string();
    let r = dashboard(&app, &bob, Method::GET, "/contacts", &p.id, None).await;
    assert_eq!(
        r.status, 200,
        "the new member reaches the project: {}",
        r.body
    );
    invite(&app, owner, &p, json!({ "email": "bob@example.com" }))
        .await
        .assert_error(409, "CONFLICT");

    // An address without one gets an invitation; signing up through it makes a member.
    let r = invite(&app, owner, &p, json!({ "email": "carol@example.com" })).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["role"], "MEMBER");
    let token = mailed_token(&app, "carol@example.com", &[]).await;
    let list = dashboard(&app, owner, Method::GET, &members, &p.id, None).await;
    assert_eq!(list.body["invitations"][0]["email"], "carol@example.com");
    let signup = |email: &str| {
        let body =
            json!({ "email": email, "password": "correct horse battery", "invitation": token });
        let app = &app;
        async move {
            let client = jar();
            let r = app
                .call_with(&client, Method::POST, "/auth/signup", None, Some(body), &[])
                .await;
            (client, r)
        }
    };
    let (_, r) = signup("mallory@example.com").await;
    r.assert_error(422, "VALIDATION_ERROR");
    assert_eq!(r.error_fields(), vec!["invitation"]);
    let (carol, r) = signup("carol@example.com").await;
    assert_eq!(r.status, 201, "{}", r.body);
    let carol_id = r.body["user"]["id"].as_str().unwrap().to_string();
    let (_, r) = signup("carol@example.com").await;
    r.assert_error(422, "VALIDATION_ERROR");
    let list = dashboard(&app, &carol, Method::GET, &members, &p.id, None).await;
    assert_eq!(list.status, 200, "{}", list.body);
    let roles: Vec<(&str, &str)> = list.body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["email"].as_str().unwrap(), m["role"].as_str().unwrap()))
        .collect();
    assert_eq!(roles.len(), 3);
    assert!(roles.contains(&("bob@example.com", "ADMIN")));
    assert!(roles.contains(&("carol@example.com", "MEMBER")));
    assert_eq!(list.body["invitations"], json!([]));

    // A MEMBER manages nobody; an ADMIN manages members but not owners.
    let path = |user: &str| format!("/projects/{}/members/{user}", p.id);
    let patch = |client: &reqwest::Client, user: &str, role: &str| {
        let (client, path) = (client.clone(), path(user));
        let body = json!({ "role": role });
        let (app, id) = (&app, p.id.clone());
        async move { dashboard(app, &client, Method::PATCH, &path, &id, Some(body)).await }
    };
    let remove = |client: &reqwest::Client, user: &str| {
        let (client, path) = (client.clone(), path(user));
        let (app, id) = (&app, p.id.clone());
        async move { dashboard(app, &client, Method::DELETE, &path, &id, None).await }
    };
    invite(&app, &carol, &p, json!({ "email": "dave@example.com" }))
        .await
        .assert_error(403, "FORBIDDEN");
    patch(&carol, &bob_id, "MEMBER")
        .await
        .assert_error(403, "FORBIDDEN");
    remove(&carol, &bob_id).await.assert_error(403, "FORBIDDEN");
    patch(&bob, &bob_id, "OWNER")
        .await
        .assert_error(403, "FORBIDDEN");
    patch(&bob, &owner_id, "ADMIN")
        .await
        .assert_error(403, "FORBIDDEN");
    remove(&bob, &owner_id).await.assert_error(403, "FORBIDDEN");
    invite(
        &app,
        &bob,
        &p,
        json!({ "email": "erin@example.com", "role": "OWNER" }),
    )
    .await
    .assert_error(403, "FORBIDDEN");
    let r = patch(&bob, &carol_id, "admin").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["role"], "ADMIN");
    patch(&bob, &carol_id, "boss")
        .await
        .assert_error(422, "VALIDATION_ERROR");
    patch(&bob, "usr_nobody", "MEMBER")
        .await
        .assert_error(404, "NOT_FOUND");

    // The last owner can be neither demoted nor removed, until another member is made OWNER.
    let r = patch(owner, &owner_id, "ADMIN").await;
    r.assert_error(409, "CONFLICT");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("last OWNER")
    );
    remove(owner, &owner_id).await.assert_error(409, "CONFLICT");
    assert_eq!(patch(owner, &bob_id, "OWNER").await.status, 200);
    let r = patch(owner, &owner_id, "MEMBER").await;
    assert_eq!(r.status, 200, "ownership transferred: {}", r.body);

    // Anyone may leave; then the project is gone for them.
    assert_eq!(remove(&carol, &carol_id).await.status, 204);
    dashboard(&app, &carol, Method::GET, "/contacts", &p.id, None)
        .await
        .assert_error(404, "NOT_FOUND");
    // Another project's members are not this user's business.
    let other = app.project().await;
    let path = format!("/projects/{}/members", other.id);
    dashboard(&app, owner, Method::GET, &path, &other.id, None)
        .await
        .assert_error(404, "NOT_FOUND");
}

/// What each role may do: (operation, OWNER, ADMIN, MEMBER) statuses.
#[tokio::test]
async fn each_role_may_do_what_decisions_md_says() {
    let app = TestApp::spawn().await;
    for (role, allowed) in [
        ("OWNER", [true; 4]),
        ("ADMIN", [true, true, true, false]),
        ("MEMBER", [false; 4]),
    ] {
        let p = app.project().await;
        let email = format!(
            "{}-{}@example.com",
            role.to_lowercase(),
            uuid::Uuid::new_v4().simple()
        );
        let client = app.verified_user(&email).await;
        let r = invite(&app, &p.owner, &p, json!({ "email": email, "role": role })).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let settings = format!("/users/@me/projects/{}", p.id);
        let ops: [(Method, String, Option<Value>, u16); 4] = [
            (
                Method::PATCH,
                settings.clone(),
                Some(json!({ "name": "renamed" })),
                200,
            ),
            (
                Method::POST,
                format!("{settings}/regenerate-keys"),
                None,
                200,
            ),
            (
                Method::POST,
                format!("/projects/{}/members", p.id),
                Some(
                    json!({ "email": format!("x-{}@example.com", uuid::Uuid::new_v4().simple()) }),
                ),
                202,
            ),
            (Method::DELETE, settings.clone(), None, 204),
        ];
        for ((method, path, body, ok), allowed) in ops.into_iter().zip(allowed) {
            let r = dashboard(&app, &client, method.clone(), &path, &p.id, body).await;
            if allowed {
                assert_eq!(r.status.as_u16(), ok, "{role} {method} {path}: {}", r.body);
            } else {
                r.assert_error(403, "FORBIDDEN");
            }
        }
        // Project resources and the team list: every role (the project is gone for OWNER).
        if role != "OWNER" {
            for path in [
                "/contacts".to_string(),
                format!("/projects/{}/members", p.id),
            ] {
                let r = dashboard(&app, &client, Method::GET, &path, &p.id, None).await;
                assert_eq!(r.status, 200, "{role} GET {path}: {}", r.body);
            }
        }
    }
}

#[tokio::test]
async fn setup_state_follows_the_project_and_a_reset_wipes_its_data_only() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let other = app.project().await;
    let state_path = format!("/projects/{}/setup-state", p.id);
    let state = || dashboard(&app, &p.owner, Method::GET, &state_path, &p.id, None);
    let r = state().await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["domainAdded"], false);
    assert_eq!(r.body["complete"], false);
    assert_eq!(r.body["nextStep"], "domainAdded");

    let key = &p.secret_key;
    let r = app
        .post("/domains", key, json!({ "domain": "acme.test" }))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let domain = format!("/domains/{}", r.body["id"].as_str().unwrap());
    p.contact(&app, "ann@example.com", json!({})).await;
    p.contact(&app, "bob@example.com", json!({})).await;
    other.contact(&app, "keep@example.com", json!({})).await;
    let tracked = json!({ "event": "signed-up", "email": "ann@example.com" });
    assert_eq!(
        app.post("/v1/track", &p.public_key, tracked).await.status,
        200
    );
    let template =
        json!({ "name": "Welcome", "subject": "Hi", "body": "<p>Hi</p>", "type": "TRANSACTIONAL" });
    assert_eq!(app.post("/templates", key, template).await.status, 201);
    let r = state().await;
    assert_eq!(r.body["domainAdded"], true);
    assert_eq!(r.body["domainVerified"], false);
    assert_eq!(r.body["contactAdded"], true);
    assert_eq!(r.body["templateCreated"], true);
    assert_eq!(r.body["nextStep"], "domainVerified");

    // Only the OWNER resets.
    let admin = app.verified_user("admin@example.com").await;
    let r = invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "admin@example.com", "role": "ADMIN" }),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let reset = format!("/users/@me/projects/{}/reset", p.id);
    dashboard(&app, &admin, Method::POST, &reset, &p.id, None)
        .await
        .assert_error(403, "FORBIDDEN");
    let r = dashboard(&app, &p.owner, Method::POST, &reset, &p.id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["success"], true);
    assert_eq!(r.body["deleted"]["contacts"], 2);
    assert_eq!(r.body["deleted"]["templates"], 1);
    assert_eq!(r.body["deleted"]["events"], 1);

    // The data is gone; the project, its keys, members and domains stay; others are untouched.
    let contacts = app.get("/contacts", key).await;
    assert_eq!(
        contacts.status, 200,
        "the keys still work: {}",
        contacts.body
    );
    assert_eq!(contacts.body["total"], 0);
    assert_eq!(app.get("/templates", key).await.body["data"], json!([]));
    assert_eq!(app.get(&domain, key).await.status, 200, "the domain stays");
    let members = format!("/projects/{}/members", p.id);
    let team = dashboard(&app, &admin, Method::GET, &members, &p.id, None).await;
    assert_eq!(team.body["members"].as_array().unwrap().len(), 2);
    assert_eq!(
        app.get("/contacts", &other.secret_key).await.body["total"],
        1
    );
    assert_eq!(state().await.body["contactAdded"], false);
}

#[tokio::test]
async fn a_bounce_rate_over_the_threshold_suspends_sending_until_an_operator_lifts_it() {
    let app = TestApp::spawn_with(|s| {
        s.domains.allow_unverified = true;
        s.plugins.notify_secret = Some("notify-secret".into());
        s.security.min_volume = 4;
        s.security.bounce_rate_threshold = 0.5;
        s.jobs_poll_interval_ms = 20;
    })
    .await;
    let p = app.project().await;
    let send = |to: Value| {
        let body =
            json!({ "to": to, "from": "hello@acme.test", "subject": "Hi", "body": "<p>Hi</p>" });
        let (app, key) = (&app, p.secret_key.clone());
        async move { app.post("/v1/send", &key, body).await }
    };
    let r = send(json!([
        "a@example.com",
        "b@example.com",
        "c@example.com",
        "d@example.com"
    ]))
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ids: Vec<String> = r.body["data"]["emails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["email"].as_str().unwrap().to_string())
        .collect();
    for id in &ids {
        crate::http::send::email_with_status(&app, &p, id, "sent").await;
    }
    let security = format!("/projects/{}/security", p.id);
    let health = || dashboard(&app, &p.owner, Method::GET, &security, &p.id, None);
    let r = health().await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["sent"], 4);
    assert_eq!(r.body["suspended"], false);
    assert_eq!(r.body["thresholds"]["minVolume"], 4);

    // Two of four hard-bounce (in the outbox transport's notification format): 50 %.
    let message_id = |to: &str| -> String {
        let raw = app
            .outbox_messages()
            .into_iter()
            .find(|m| m.contains(&format!("To: {to}")))
            .unwrap();
        crate::support::harness::message_id_of(&raw)
    };
    let bounce =
        |to: &str| json!({ "type": "bounced-hard", "messageId": message_id(to), "email": to });
    let r = app
        .client
        .post(app.url("/webhooks/notify"))
        .header("x-herald-secret", "notify-secret")
        .json(&json!({ "events": [bounce("a@example.com"), bounce("b@example.com")] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let r = health().await;
    assert_eq!(r.body["suspended"], true, "{}", r.body);
    assert_eq!(r.body["bounced"], 2);
    assert_eq!(r.body["bounceRate"], 0.5);
    let reason = r.body["suspensions"][0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("bounce rate 50.00 % (2 of 4 emails)"),
        "{reason}"
    );
    assert_eq!(r.body["suspensions"][0]["liftedAt"], Value::Null);
    let mine = format!("/users/@me/projects/{}/security", p.id);
    let r = dashboard(&app, &p.owner, Method::GET, &mine, &p.id, None).await;
    assert_eq!(r.body["suspended"], true);
    // The owner is told by mail.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !app
        .outbox_messages()
        .iter()
        .any(|m| m.contains("Sending is suspended for"))
    {
        assert!(std::time::Instant::now() < deadline, "no suspension mail");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Nothing new is sent.
    let r = send(json!("e@example.com")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains("suspended"),
        "{}",
        r.body
    );

    // The operator lifts it with the CLI; sending works again, and the history stays.
    let lift = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args([
                "projects",
                "lift-suspension",
                &p.id,
                "--database-url",
                &app.database_url,
            ])
            .output()
            .unwrap()
    };
    let out = lift();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!lift().status.success(), "nothing left to lift");
    assert_eq!(send(json!("e@example.com")).await.status, 200);
    let r = health().await;
    assert_eq!(r.body["suspended"], false);
    assert!(
        r.body["suspensions"][0]["liftedAt"].is_string(),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn expired_account_links_are_pruned() {
    use herald::domain::email::EmailAddress;
    use herald::domain::ids::ProjectId;
    use herald::domain::project::Role;
    use herald::store::accounts::TokenPurpose;
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let store = app.state().store();
    let project = ProjectId::parse(&p.id).unwrap();
    let owner = herald::domain::ids::UserId::parse(&user_id(&app, &p.owner).await).unwrap();
    let two_days = 2 * 86_400_000;
    let old = EmailAddress::parse("old@example.com").unwrap();
    let new = EmailAddress::parse("new@example.com").unwrap();
    store
        .invite(&project, &old, Role::Member, &owner, "h-old", -two_days)
        .await
        .unwrap();
    store
        .invite(&project, &new, Role::Member, &owner, "h-new", two_days)
        .await
        .unwrap();
    store
        .create_account_token(
            &owner,
            TokenPurpose::ResetPassword,
            "t-old",
            &old,
            -two_days,
        )
        .await
        .unwrap();
    assert_eq!(store.prune_account_links().await.unwrap(), 2);
    assert_eq!(store.prune_account_links().await.unwrap(), 0);
    let left = store.invitations(&project).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].email, "new@example.com");
}

async fn accept(app: &TestApp, client: &reqwest::Client, token: &str) -> Reply {
    let body = json!({ "token": token });
    app.call_with(
        client,
        Method::POST,
        "/users/@me/invitations/accept",
        None,
        Some(body),
        &[],
    )
    .await
}

async fn project_ids(app: &TestApp, client: &reqwest::Client) -> Vec<String> {
    let r = app
        .call_with(client, Method::GET, "/users/@me/projects", None, None, &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

/// The pre-claimed account: someone signs up with an address they do not own (signup logs in
/// at once) and waits for an OWNER to invite it. It is mailed an invitation instead of joining;
/// only whoever reads that address's mail can accept.
#[tokio::test]
async fn an_account_that_has_not_verified_its_address_is_invited_not_added() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let members = format!("/projects/{}/members", p.id);
    let squatter = app.user("new.hire@victim.test").await;

    let r = invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "new.hire@victim.test", "role": "ADMIN" }),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["email"], "new.hire@victim.test");
    assert_eq!(r.body["role"], "ADMIN");
    assert!(r.body.get("userId").is_none(), "{}", r.body);
    // Not a member: the project is out of the account's reach.
    assert!(!project_ids(&app, &squatter).await.contains(&p.id));
    dashboard(&app, &squatter, Method::GET, "/contacts", &p.id, None)
        .await
        .assert_error(404, "NOT_FOUND");
    let rotate = format!("/users/@me/projects/{}/regenerate-keys", p.id);
    dashboard(&app, &squatter, Method::POST, &rotate, &p.id, None)
        .await
        .assert_error(404, "NOT_FOUND");
    let list = dashboard(&app, &p.owner, Method::GET, &members, &p.id, None).await;
    assert_eq!(list.body["members"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["invitations"][0]["email"], "new.hire@victim.test");
    assert_eq!(list.body["invitations"][0]["role"], "ADMIN");

    // The mail carries an accept link; a guessed token, or the right one in another account's
    // session, or without a session, joins nobody.
    let first = mailed_token(&app, "new.hire@victim.test", &[]).await;
    let mail = app
        .outbox_messages()
        .into_iter()
        .find(|m| m.contains("To: new.hire@victim.test"))
        .unwrap();
    assert!(
        mail.contains("/invitations/accept?token="),
        "the accept link: {mail}"
    );
    let r = accept(&app, &squatter, "guessed").await;
    r.assert_error(404, "NOT_FOUND");
    let other = app.verified_user("other@example.com").await;
    accept(&app, &other, &first)
        .await
        .assert_error(404, "NOT_FOUND");
    assert!(!project_ids(&app, &other).await.contains(&p.id));
    accept(&app, &jar(), &first)
        .await
        .assert_error(401, "MISSING_AUTH");

    // A new invitation replaces the first, whose link stops working.
    let r = invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "new.hire@victim.test", "role": "MEMBER" }),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let second = mailed_token(&app, "new.hire@victim.test", &[&first]).await;
    accept(&app, &squatter, &first)
        .await
        .assert_error(404, "NOT_FOUND");

    // Whoever reads the mail accepts in the account: the address is verified, the role is the
    // invited one, the link is used up.
    let r = accept(&app, &squatter, &second).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["id"], p.id.as_str());
    assert_eq!(r.body["role"], "MEMBER");
    let me = app
        .call_with(&squatter, Method::GET, "/users/@me", None, None, &[])
        .await;
    assert_eq!(me.body["emailVerified"], true);
    let r = dashboard(&app, &squatter, Method::GET, "/contacts", &p.id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    accept(&app, &squatter, &second)
        .await
        .assert_error(404, "NOT_FOUND");
    let list = dashboard(&app, &p.owner, Method::GET, &members, &p.id, None).await;
    assert_eq!(list.body["members"].as_array().unwrap().len(), 2);
    assert_eq!(list.body["invitations"], json!([]));
    // A member already: no second invitation.
    invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "new.hire@victim.test" }),
    )
    .await
    .assert_error(409, "CONFLICT");
}

#[tokio::test]
async fn an_expired_invitation_is_not_accepted() {
    use herald::domain::email::EmailAddress;
    use herald::domain::ids::{ProjectId, UserId};
    use herald::domain::project::Role;
    use sha2::{Digest, Sha256};
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let late = app.user("late@example.com").await;
    let owner = UserId::parse(&user_id(&app, &p.owner).await).unwrap();
    let hash = hex::encode(Sha256::digest(b"expired-token"));
    app.state()
        .store()
        .invite(
            &ProjectId::parse(&p.id).unwrap(),
            &EmailAddress::parse("late@example.com").unwrap(),
            Role::Admin,
            &owner,
            &hash,
            -1_000,
        )
        .await
        .unwrap();
    accept(&app, &late, "expired-token")
        .await
        .assert_error(404, "NOT_FOUND");
    assert!(!project_ids(&app, &late).await.contains(&p.id));
}

/// Someone signs up with an invited address after the invitation was mailed: the signup link
/// then answers 409, and the address's owner takes the account back by a password reset (which
/// ends the other sessions) and accepts the same token signed in.
#[tokio::test]
async fn an_invitation_whose_address_was_claimed_meanwhile_is_accepted_after_a_reset() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let r = invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "dana@example.com", "role": "ADMIN" }),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let invitation = mailed_token(&app, "dana@example.com", &[]).await;
    let squatter = app.user("dana@example.com").await;
    assert!(!project_ids(&app, &squatter).await.contains(&p.id));

    let signup = json!({
        "email": "dana@example.com", "password": "another long one", "invitation": invitation,
    });
    let r = app
        .call_with(
            &jar(),
            Method::POST,
            "/auth/signup",
            None,
            Some(signup),
            &[],
        )
        .await;
    r.assert_error(409, "CONFLICT");
    assert!(
        r.body["error"]["suggestion"]
            .as_str()
            .is_some_and(|s| s.contains("/users/@me/invitations/accept")),
        "{}",
        r.body
    );

    let reset = json!({ "email": "dana@example.com" });
    let r = app
        .call(
            Method::POST,
            "/auth/request-password-reset",
            None,
            Some(reset),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let token = mailed_token(&app, "dana@example.com", &[&invitation]).await;
    let body = json!({ "token": token, "password": "another long one" });
    let r = app
        .call(Method::POST, "/auth/reset-password", None, Some(body))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    app.call_with(&squatter, Method::GET, "/users/@me", None, None, &[])
        .await
        .assert_error(401, "UNAUTHORIZED");
    let dana = jar();
    let login = json!({ "email": "dana@example.com", "password": "another long one" });
    let r = app
        .call_with(&dana, Method::POST, "/auth/login", None, Some(login), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = accept(&app, &dana, &invitation).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["role"], "ADMIN");
}

#[tokio::test]
async fn team_mail_is_limited_per_inviter_per_hour_and_per_project_per_day() {
    let app = TestApp::spawn_with(|s| {
        s.accounts.invitations_per_inviter_per_hour = 3;
        s.accounts.invitations_per_project_per_day = 4;
    })
    .await;
    let p = app.project().await;
    let address = |i: usize| format!("limited-{i}@example.com");
    let admin = app.verified_user("admin@example.com").await;
    let r = invite(
        &app,
        &p.owner,
        &p,
        json!({ "email": "admin@example.com", "role": "ADMIN" }),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for i in 0..2 {
        let r = invite(&app, &p.owner, &p, json!({ "email": address(i) })).await;
        assert_eq!(r.status, 202, "{}", r.body);
    }
    // The owner's fourth team mail within the hour.
    let r = invite(&app, &p.owner, &p, json!({ "email": address(2) })).await;
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 3 an hour")
            && message.contains("accounts.invitations_per_inviter_per_hour"),
        "{message}"
    );
    assert!(r.header("retry-after").is_some());
    // Across the inviter's projects.
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            "/users/@me/projects",
            None,
            Some(json!({ "name": "Second" })),
            &[],
        )
        .await;
    let second = r.body["id"].as_str().unwrap().to_string();
    let path = format!("/projects/{second}/members");
    dashboard(
        &app,
        &p.owner,
        Method::POST,
        &path,
        &second,
        Some(json!({ "email": address(3) })),
    )
    .await
    .assert_error(429, "RATE_LIMIT_EXCEEDED");

    // Another manager of the project has their own hourly count, but the project's daily one
    // (3 so far) allows one more.
    let r = invite(&app, &admin, &p, json!({ "email": address(4) })).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = invite(&app, &admin, &p, json!({ "email": address(5) })).await;
    r.assert_error(429, "RATE_LIMIT_EXCEEDED");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 4 a day")
            && message.contains("accounts.invitations_per_project_per_day"),
        "{message}"
    );
    // Nothing was mailed for the refused ones, nor kept.
    let messages = app.outbox_messages();
    for i in [2, 3, 5] {
        let to = format!("To: {}", address(i));
        assert!(!messages.iter().any(|m| m.contains(&to)), "mailed {to}");
    }
    let members = format!("/projects/{}/members", p.id);
    let list = dashboard(&app, &p.owner, Method::GET, &members, &p.id, None).await;
    assert_eq!(list.body["invitations"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn pruning_keeps_the_day_long_team_mail_counters_until_their_day_is_over() {
    let app = TestApp::spawn().await;
    let store = app.state().store();
    let now = chrono::Utc::now().timestamp_millis();
    let hour = 3_600_000;
    let windows = [
        ("prj_minute", now - 600_000),
        ("mail:project:prj_x", now - 20 * hour),
        ("mail:inviter:usr_x", now - 2 * hour),
        ("mail:project:prj_old", now - 25 * hour),
    ];
    for (bucket, start) in windows {
        store.rate_limit_add(bucket, start, 1).await.unwrap();
    }
    app.state().rate_limiter().prune(store).await;
    let mut left = Vec::new();
    for (bucket, start) in windows {
        // Adding nothing answers the count so far.
        left.push(store.rate_limit_add(bucket, start, 0).await.unwrap());
    }
    assert_eq!(left, vec![0, 1, 1, 0]);
}

#[tokio::test]
async fn an_invitation_is_mailed_in_the_inviters_language() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    let path = format!("/projects/{}/members", p.id);
    let r = app
        .call_with(
            &p.owner,
            Method::POST,
            &path,
            None,
            Some(json!({ "email": "dora@example.com" })),
            &[
                ("X-Project-Id", &p.id),
                ("Accept-Language", "fr-CA, en;q=0.5"),
            ],
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let token = mailed_token(&app, "dora@example.com", &[]).await;
    let raw = app
        .outbox_messages()
        .into_iter()
        .rfind(|m| m.contains("To: dora@example.com"))
        .unwrap();
    let parsed = mail_parser::MessageParser::default()
        .parse(raw.as_bytes())
        .unwrap();
    assert!(
        parsed
            .subject()
            .unwrap()
            .contains("vous invite à rejoindre"),
        "{:?}",
        parsed.subject()
    );
    let text = parsed.body_text(0).unwrap();
    assert!(text.starts_with("Bonjour,"), "{text}");
    assert!(text.contains(&token), "the link is kept: {text}");
    let html = parsed.body_html(0).unwrap();
    assert!(
        html.contains(">Créer mon compte et rejoindre le projet</a>"),
        "{html}"
    );
}

/// Tracks `n` events named `event` for as many contacts (`<prefix><i>@example.com`, each with
/// `data.plan`), 16 requests at a time.
async fn seed(app: &TestApp, p: &TestProject, prefix: &str, event: &str, n: usize) {
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .map(|i| async move {
            let r = app
                .post(
                    "/v1/track",
                    &p.secret_key,
                    json!({ "email": format!("{prefix}{i}@example.com"), "event": event,
                            "data": { "plan": "pro" } }),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// The rows a project still has in its tables (the project's own row included).
async fn rows_of(app: &TestApp, project: &str) -> i64 {
    let sql = "SELECT (SELECT COUNT(*) FROM projects WHERE id = $1) \
               + (SELECT COUNT(*) FROM contacts WHERE project_id = $1) \
               + (SELECT COUNT(*) FROM events WHERE project_id = $1) \
               + (SELECT COUNT(*) FROM event_summaries WHERE project_id = $1) \
               + (SELECT COUNT(*) FROM contact_fields WHERE project_id = $1) \
               + (SELECT COUNT(*) FROM memberships WHERE project_id = $1)";
    match app.state().store().db() {
        herald::store::Db::Sqlite { pool, .. } => sqlx::query_scalar(sql)
            .bind(project)
            .fetch_one(pool)
            .await
            .unwrap(),
        herald::store::Db::Postgres(pool) => sqlx::query_scalar(sql)
            .bind(project)
            .fetch_one(pool)
            .await
            .unwrap(),
    }
}

#[tokio::test]
async fn deletes_of_thousands_of_rows_go_in_chunks_and_leave_nothing_behind() {
    let app = TestApp::spawn_with(|s| s.rate_limit_per_minute = 1_000_000).await;
    let p = app.project().await;
    let other = app.project().await;
    let n = 1_200;
    seed(&app, &p, "u", "visit", n).await;
    seed(&app, &other, "o", "visit", 20).await;

    // A custom field leaves every contact, and its type goes.
    let r = app
        .delete("/contacts/fields/data.plan", &p.secret_key)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["contactsUpdated"], n, "{}", r.body);
    let fields = app.get("/contacts/fields", &p.secret_key).await;
    assert!(
        !fields.body.to_string().contains("\"plan\""),
        "{}",
        fields.body
    );
    let again = app
        .delete("/contacts/fields/data.plan", &p.secret_key)
        .await;
    assert_eq!(
        again.body["contactsUpdated"], 0,
        "no contact has it: {}",
        again.body
    );

    // Every event of the name goes, with the contacts' summaries of it.
    let deleted = crate::http::events::delete_events_once_dispatched(&app, &p, "visit").await;
    assert_eq!(deleted, n as u64);
    let names = app.get("/events/names", &p.secret_key).await;
    assert!(!names.body.to_string().contains("visit"), "{}", names.body);
    let segment = app
        .post(
            "/segments",
            &p.secret_key,
            json!({ "name": "Visitors", "type": "DYNAMIC", "condition": { "logic": "AND",
                    "groups": [{ "filters": [{ "field": "event.visit", "operator": "triggered" }] }] } }),
        )
        .await;
    assert_eq!(segment.status, 201, "{}", segment.body);
    let id = segment.body["id"].as_str().unwrap();
    let members = app
        .get(&format!("/segments/{id}/contacts"), &p.secret_key)
        .await;
    assert_eq!(members.body["total"], 0, "{}", members.body);

    // A reset deletes every contact.
    seed(&app, &p, "v", "again", 600).await;
    let reset = format!("/users/@me/projects/{}/reset", p.id);
    let r = dashboard(&app, &p.owner, Method::POST, &reset, &p.id, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["deleted"]["contacts"], n + 600, "{}", r.body);
    assert_eq!(r.body["deleted"]["events"], 600, "{}", r.body);
    assert_eq!(app.get("/contacts", &p.secret_key).await.body["total"], 0);

    // A deleted project is gone whole; the other project keeps everything.
    seed(&app, &p, "w", "last", 1_100).await;
    let before = rows_of(&app, &other.id).await;
    let path = format!("/users/@me/projects/{}", p.id);
    let r = app
        .call_with(&p.owner, Method::DELETE, &path, None, None, &[])
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    assert_eq!(rows_of(&app, &p.id).await, 0);
    app.get("/contacts", &p.secret_key)
        .await
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(rows_of(&app, &other.id).await, before);
    assert_eq!(
        app.get("/contacts", &other.secret_key).await.body["total"],
        20
    );
}

#[tokio::test]
async fn a_project_deletion_left_half_done_is_unreachable_and_finished_by_maintenance() {
    let app = TestApp::spawn().await;
    let p = app.project().await;
    seed(&app, &p, "u", "visit", 30).await;
    // As a deletion interrupted after its first step leaves it (an hour ago).
    crate::support::harness::execute_sql(
        &app.database_url,
        &format!(
            "UPDATE projects SET deleted_at = 1, public_key_hash = 'deleted:public:' || id, \
             secret_key_hash = 'deleted:secret:' || id WHERE id = '{0}'; \
             DELETE FROM memberships WHERE project_id = '{0}'",
            p.id
        ),
    )
    .await;
    app.get("/contacts", &p.secret_key)
        .await
        .assert_error(401, "UNAUTHORIZED");
    let listed = app
        .call_with(
            &p.owner,
            Method::GET,
            "/users/@me/projects",
            None,
            None,
            &[],
        )
        .await;
    assert!(!listed.body.to_string().contains(&p.id), "{}", listed.body);
    assert!(rows_of(&app, &p.id).await > 0);
    // Another instance's maintenance (its first round runs at start) finishes it.
    let _other = app.spawn_sharing(|_| {}).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while rows_of(&app, &p.id).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the deletion was not finished"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
