//! Projects (tenants), their members' roles and dashboard users.

use super::email::EmailAddress;
use super::ids::{ProjectId, UserId};

/// A member's role in a project (decisions.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    Owner,
    /// Everything but deleting or resetting the project and billing.
    Admin,
    /// Project resources, not keys, members, billing or settings.
    Member,
}

impl Role {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "OWNER",
            Role::Admin => "ADMIN",
            Role::Member => "MEMBER",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "OWNER" => Some(Role::Owner),
            "ADMIN" => Some(Role::Admin),
            "MEMBER" => Some(Role::Member),
            _ => None,
        }
    }

    /// May change settings and rotate keys.
    pub fn can_manage(self) -> bool {
        matches!(self, Role::Owner | Role::Admin)
    }

    /// May delete or reset the project.
    pub fn can_delete_project(self) -> bool {
        matches!(self, Role::Owner)
    }

    /// May see and change billing: checkout, portal, caps, consumption and invoices.
    pub fn can_manage_billing(self) -> bool {
        matches!(self, Role::Owner)
    }
}

/// A stored project.
#[derive(Clone, Debug)]
pub struct Project {
    pub id: ProjectId,
    /// Display name.
    pub name: String,
    /// Start of the public key, for listings.
    pub public_key_hint: String,
    /// Start of the secret key, for listings.
    pub secret_key_hint: String,
    /// A disabled project's keys answer 403 `PROJECT_DISABLED`.
    pub disabled: bool,
    /// Whether its emails carry an open pixel.
    pub track_opens: bool,
    /// Whether its emails' links go through click redirects.
    pub track_clicks: bool,
    /// The sender `/v1/send` uses when neither the request nor the template names one.
    pub default_from: Option<DefaultSender>,
    /// The transport its mail goes through (unless its sending domain names one); `None`: the
    /// deployment's default.
    pub transport: Option<String>,
    /// Creation time, unix ms.
    pub created_at: i64,
    /// Last change, unix ms.
    pub updated_at: i64,
    /// Why the project's sending is suspended, while a suspension holds (read with the
    /// project, so a send checks it without a read of its own).
    pub sending_suspended: Option<String>,
    /// Which subscriptions wait for the contact's confirmation (docs/engagement.md).
    pub double_opt_in: DoubleOptIn,
    /// The template of the confirmation mail instead of the built-in one.
    pub confirmation_template: Option<String>,
}

/// Which asked subscriptions make a contact pending until it confirms by a mailed link
/// (confirmed opt-in) instead of subscribing it at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DoubleOptIn {
    /// None: every subscription takes effect at once.
    #[default]
    Off,
    /// Those asked with the public key (`/v1/track` from web pages).
    PublicKey,
    /// Those asked through the API with either key: `/v1/track`, `POST /contacts` and
    /// `PATCH /contacts/:id`.
    All,
}

impl DoubleOptIn {
    /// The wire and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DoubleOptIn::Off => "OFF",
            DoubleOptIn::PublicKey => "PUBLIC_KEY",
            DoubleOptIn::All => "ALL",
        }
    }

    /// The value of a wire or stored name.
    pub fn parse(s: &str) -> Option<DoubleOptIn> {
        match s {
            "OFF" => Some(DoubleOptIn::Off),
            "PUBLIC_KEY" => Some(DoubleOptIn::PublicKey),
            "ALL" => Some(DoubleOptIn::All),
            _ => None,
        }
    }

    /// Whether a subscription asked by a caller (with the public key when `public_key`) waits
    /// for the contact's confirmation.
    pub fn applies(self, public_key: bool) -> bool {
        match self {
            DoubleOptIn::Off => false,
            DoubleOptIn::PublicKey => public_key,
            DoubleOptIn::All => true,
        }
    }
}

/// A project's default sender: an address on a verified sending domain, and a display name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultSender {
    /// The address.
    pub email: super::email::EmailAddress,
    /// The display name, if any.
    pub name: Option<String>,
}

/// A project's name: 1..=100 characters after trimming.
#[derive(Clone, Debug)]
pub struct ProjectName(String);

impl ProjectName {
    /// Checks the rule.
    pub fn parse(s: &str) -> Result<ProjectName, &'static str> {
        let s = s.trim();
        if s.is_empty() {
            return Err("the project name must not be empty");
        }
        if s.chars().count() > 100 {
            return Err("the project name is at most 100 characters");
        }
        Ok(ProjectName(s.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A stored dashboard user.
#[derive(Clone, Debug)]
pub struct User {
    pub id: UserId,
    /// Login address.
    pub email: EmailAddress,
    /// Whether the address was confirmed.
    pub email_verified: bool,
    /// Creation time, unix ms.
    pub created_at: i64,
}
