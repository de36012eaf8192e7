//! `herald init`: the first owner account and project of an empty deployment.

use crate::domain::email::EmailAddress;
use crate::domain::keys::KeyPair;
use crate::domain::password::{self, Password};
use crate::domain::project::ProjectName;
use crate::store::Store;

/// What `herald init` created; printed once.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitOutput {
    /// The owner's login.
    pub email: String,
    /// The owner's generated password.
    pub password: String,
    /// The first project's id.
    pub project_id: String,
    /// The project's public key.
    pub public_key: String,
    /// The project's secret key.
    pub secret_key: String,
}

/// Creates the owner and the first project, refusing when any account exists.
pub async fn run(store: &Store, email: &str, project_name: &str) -> anyhow::Result<InitOutput> {
    let users = store.count_users().await?;
    if users > 0 {
        anyhow::bail!(
            "this deployment is already initialised ({users} account(s) exist); log in to the dashboard or use POST /auth/login"
        );
    }
    let email = EmailAddress::parse(email).map_err(|e| anyhow::anyhow!("--email: {e}"))?;
    let name =
        ProjectName::parse(project_name).map_err(|e| anyhow::anyhow!("--project-name: {e}"))?;
    let password = Password::random();
    let hash = password::hash(password.clone()).await?;
    let user = store.create_user(&email, &hash).await?;
    let keys = KeyPair::generate();
    let project = store.create_project(&name, &user.id, &keys).await?;
    Ok(InitOutput {
        email: email.to_string(),
        password: password.expose().to_string(),
        project_id: project.id.into_string(),
        public_key: keys.public_key,
        secret_key: keys.secret_key,
    })
}
