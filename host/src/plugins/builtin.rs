//! The built-in plugins, compiled by `host/build.rs` and embedded in the binary.

use super::manifest::{Grants, HttpGrant, World};
use super::settings::PluginSettings;

/// A built-in plugin.
pub struct Builtin {
    pub name: &'static str,
    pub world: World,
    /// What it does.
    pub description: &'static str,
    /// The component.
    pub bytes: &'static [u8],
    /// The component compiled ahead of time by `host/build.rs` for an engine of
    /// [`AOT_COMPATIBILITY`].
    pub precompiled: &'static [u8],
    grants: fn(&PluginSettings) -> Grants,
    /// Settings (`plugins.settings.<name>.*`) it cannot work without: a start with one of them
    /// unset stops with the setting named.
    pub required: &'static [&'static str],
}

impl Builtin {
    /// The capabilities it is granted under `settings`.
    pub fn grants(&self, settings: &PluginSettings) -> Grants {
        (self.grants)(settings)
    }
}

macro_rules! component {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file, ".wasm"))
    };
}

macro_rules! precompiled {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file, ".cwasm"))
    };
}

/// The compatibility hash (see `engine_config::compatibility`) of the engine that compiled the
/// embedded artifacts.
pub const AOT_COMPATIBILITY: &str = include_str!(concat!(env!("OUT_DIR"), "/aot-compatibility"));

fn nothing(_: &PluginSettings) -> Grants {
    Grants::default()
}

fn clock(_: &PluginSettings) -> Grants {
    Grants {
        clock: true,
        ..Grants::default()
    }
}

fn webhook(settings: &PluginSettings) -> Grants {
    Grants {
        log: true,
        http: Some(HttpGrant {
            allow: settings.webhook_allow.clone(),
            allow_private: settings.webhook_allow_private,
        }),
        ..Grants::default()
    }
}

/// The grants of a provider transport plugin (`ses`, `postmark`…): log, clock and HTTP to the
/// provider's own hosts (`hosts`) and, when `plugins.settings.<plugin>.api_base` points it
/// elsewhere, to that URL's host too; loopback and private addresses only with
/// `plugins.transport_http_allow_private`.
pub(crate) fn provider(settings: &PluginSettings, plugin: &str, hosts: &[&str]) -> Grants {
    let mut allow: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    if let Some(host) = settings
        .settings
        .get(plugin)
        .and_then(|s| s.get("api_base"))
        .and_then(|base| reqwest::Url::parse(base).ok())
        .and_then(|url| url.host_str().map(str::to_string))
    {
        allow.push(host);
    }
    Grants {
        log: true,
        clock: true,
        http: Some(HttpGrant {
            allow,
            allow_private: settings.transport_http_allow_private,
        }),
        ..Grants::default()
    }
}

/// The built-in plugins.
pub static BUILTINS: [Builtin; 14] = [
    Builtin {
        name: "send-email",
        world: World::Step,
        description: "SEND_EMAIL: send a template to the contact or an address",
        bytes: component!("step_send_email"),
        precompiled: precompiled!("step_send_email"),
        grants: nothing,
        required: &[],
    },
    Builtin {
        name: "delay",
        world: World::Step,
        description: "DELAY: wait minutes, hours or days",
        bytes: component!("step_delay"),
        precompiled: precompiled!("step_delay"),
        grants: clock,
        required: &[],
    },
    Builtin {
        name: "wait-for-event",
        world: World::Step,
        description: "WAIT_FOR_EVENT: wait for an event, with an optional timeout",
        bytes: component!("step_wait_for_event"),
        precompiled: precompiled!("step_wait_for_event"),
        grants: clock,
        required: &[],
    },
    Builtin {
        name: "condition",
        world: World::Step,
        description: "CONDITION: branch yes/no on a filter",
        bytes: component!("step_condition"),
        precompiled: precompiled!("step_condition"),
        grants: clock,
        required: &[],
    },
    Builtin {
        name: "webhook",
        world: World::Step,
        description: "WEBHOOK: call a URL",
        bytes: component!("step_webhook"),
        precompiled: precompiled!("step_webhook"),
        grants: webhook,
        required: &[],
    },
    Builtin {
        name: "update-contact",
        world: World::Step,
        description: "UPDATE_CONTACT: set data keys and/or the subscription",
        bytes: component!("step_update_contact"),
        precompiled: precompiled!("step_update_contact"),
        grants: nothing,
        required: &[],
    },
    Builtin {
        name: "exit",
        world: World::Step,
        description: "EXIT: end the execution",
        bytes: component!("step_exit"),
        precompiled: precompiled!("step_exit"),
        grants: nothing,
        required: &[],
    },
    Builtin {
        name: "outbox",
        world: World::Transport,
        description: "write each message as an .eml file under the data directory",
        bytes: component!("transport_outbox"),
        precompiled: precompiled!("transport_outbox"),
        grants: |_| Grants {
            clock: true,
            outbox: true,
            ..Grants::default()
        },
        required: &[],
    },
    Builtin {
        name: "smtp",
        world: World::Transport,
        description: "deliver through the configured SMTP relay",
        bytes: component!("transport_smtp"),
        precompiled: precompiled!("transport_smtp"),
        grants: |_| Grants {
            clock: true,
            smtp: true,
            ..Grants::default()
        },
        required: &[],
    },
    Builtin {
        name: "postmark",
        world: World::Transport,
        description: "deliver through Postmark's batch API, with its bounce, complaint, delivery, open and click webhooks",
        bytes: component!("transport_postmark"),
        precompiled: precompiled!("transport_postmark"),
        grants: |s| provider(s, "postmark", &["api.postmarkapp.com"]),
        required: &["server_token"],
    },
    Builtin {
        name: "resend",
        world: World::Transport,
        description: "deliver through Resend's batch API, with its Svix-signed webhooks",
        bytes: component!("transport_resend"),
        precompiled: precompiled!("transport_resend"),
        grants: |s| provider(s, "resend", &["api.resend.com"]),
        required: &["api_key"],
    },
    Builtin {
        name: "default",
        world: World::DnsVerifier,
        description: "DKIM, SPF, return-path MX and DMARC records",
        bytes: component!("dns_verifier_default"),
        precompiled: precompiled!("dns_verifier_default"),
        grants: |_| Grants {
            dns: true,
            ..Grants::default()
        },
        required: &[],
    },
    Builtin {
        name: "none",
        world: World::Billing,
        description: "billing off",
        bytes: component!("billing_none"),
        precompiled: precompiled!("billing_none"),
        grants: nothing,
        required: &[],
    },
    Builtin {
        name: "stripe",
        world: World::Billing,
        description: "Stripe checkout, customer portal, invoices and signed webhooks",
        bytes: component!("billing_stripe"),
        precompiled: precompiled!("billing_stripe"),
        grants: |settings| Grants {
            log: true,
            clock: true,
            http: Some(HttpGrant {
                allow: settings.billing_http_allow.clone(),
                allow_private: settings.billing_http_allow_private,
            }),
            ..Grants::default()
        },
        required: &[],
    },
];

/// Workflow step types and the built-in plugin that runs each (`PLUGIN` names its plugin in
/// `config.plugin`).
pub const STEP_TYPES: [(&str, &str); 7] = [
    ("SEND_EMAIL", "send-email"),
    ("DELAY", "delay"),
    ("WAIT_FOR_EVENT", "wait-for-event"),
    ("CONDITION", "condition"),
    ("WEBHOOK", "webhook"),
    ("UPDATE_CONTACT", "update-contact"),
    ("EXIT", "exit"),
];
