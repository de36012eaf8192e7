//! The state every request shares: the services and what the HTTP layer itself needs.

use std::sync::Arc;

use jsonwebtoken::{DecodingKey, EncodingKey};

use crate::config::Settings;
use crate::engine::campaigns::Campaigns;
use crate::engine::workflows::WorkflowEngine;
use crate::jobs::JobQueue;
use crate::mail::links::LinkSigner;
use crate::plugins::Plugins;
use crate::services::ratelimit::RateLimiter;
use crate::services::send_plan::SendPlanner;
use crate::services::sending::Sending;
use crate::services::sending_domains::SendingDomains;
use crate::services::verification::Verifier;
use crate::store::Store;

/// Shared, cheaply cloned application state. Only [`crate::app::App`] builds it.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Parts>,
}

/// What the state holds; [`crate::app::App`] fills it in.
pub(crate) struct Parts {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    pub(crate) rate_limiter: Arc<RateLimiter>,
    pub(crate) jobs: JobQueue,
    pub(crate) plugins: Arc<Plugins>,
    pub(crate) verifier: Verifier,
    pub(crate) links: LinkSigner,
    pub(crate) sending: Arc<Sending>,
    pub(crate) send_planner: SendPlanner,
    pub(crate) confirmations: crate::services::confirmation::Confirmations,
    pub(crate) submission: crate::services::submission::Submission,
    pub(crate) workflows: WorkflowEngine,
    pub(crate) campaigns: Campaigns,
    pub(crate) account_mail: crate::services::account_mail::AccountMail,
    pub(crate) health_guard: crate::services::security::HealthGuard,
    pub(crate) delivery_events: crate::services::delivery_events::DeliveryEvents,
    pub(crate) uploads: crate::services::uploads::Uploads,
    pub(crate) inbound_mail: crate::services::inbound_mail::InboundMail,
    pub(crate) inbound_routes: crate::services::inbound_routes::InboundRoutes,
    pub(crate) oauth: crate::services::oauth::OAuth,
    pub(crate) engagement: crate::services::engagement::Engagement,
    pub(crate) sending_domains: Arc<SendingDomains>,
    pub(crate) live_segments: Arc<crate::engine::LiveSegments>,
    pub(crate) jwt_encoding: EncodingKey,
    pub(crate) jwt_decoding: DecodingKey,
}

impl AppState {
    /// The state made of `parts`.
    pub(crate) fn new(parts: Parts) -> AppState {
        AppState {
            inner: Arc::new(parts),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Opens and clicks: the first recorded at once, later ones counted and written in batches.
    pub fn engagement(&self) -> &crate::services::engagement::Engagement {
        &self.inner.engagement
    }

    /// The consumer that keeps tracked segments live, for the writes that emit no event.
    pub fn live_segments(&self) -> &crate::engine::LiveSegments {
        &self.inner.live_segments
    }

    /// The settings in effect.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The request limiter.
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.inner.rate_limiter
    }

    /// Mail the service sends to account holders.
    pub fn account_mail(&self) -> &crate::services::account_mail::AccountMail {
        &self.inner.account_mail
    }

    /// The sending-health guard (suspensions on bad bounce or complaint rates).
    pub fn health_guard(&self) -> &crate::services::security::HealthGuard {
        &self.inner.health_guard
    }

    /// Applies what the mail infrastructure reports (bounces, complaints, deliveries…).
    pub fn delivery_events(&self) -> &crate::services::delivery_events::DeliveryEvents {
        &self.inner.delivery_events
    }

    /// OAuth sign-in providers.
    pub fn oauth(&self) -> &crate::services::oauth::OAuth {
        &self.inner.oauth
    }

    /// Mail the projects receive on their inbound domains (the SMTP server's replies path).
    pub fn inbound_mail(&self) -> &crate::services::inbound_mail::InboundMail {
        &self.inner.inbound_mail
    }

    /// The SMTP server's routing of `RCPT` addresses at inbound domains, kept a few seconds;
    /// the domain API forgets a domain's route when it changes the domain.
    pub fn inbound_routes(&self) -> &crate::services::inbound_routes::InboundRoutes {
        &self.inner.inbound_routes
    }

    /// Image uploads.
    pub fn uploads(&self) -> &crate::services::uploads::Uploads {
        &self.inner.uploads
    }

    /// The durable job queue.
    pub fn jobs(&self) -> &JobQueue {
        &self.inner.jobs
    }

    /// The plugin platform (transport, DNS verifier, billing, steps).
    pub fn plugins(&self) -> &Arc<Plugins> {
        &self.inner.plugins
    }

    /// Email address verification (`POST /v1/verify`).
    pub fn verifier(&self) -> &Verifier {
        &self.inner.verifier
    }

    /// Makes and checks the signed links of emails.
    pub fn links(&self) -> &LinkSigner {
        &self.inner.links
    }

    /// Sending email (`/v1/send`).
    pub fn sending(&self) -> &Sending {
        &self.inner.sending
    }

    /// The plans of `/v1/send` requests.
    pub fn send_planner(&self) -> &SendPlanner {
        &self.inner.send_planner
    }

    /// Confirmed opt-in: pending contacts and their confirmations.
    pub fn confirmations(&self) -> &crate::services::confirmation::Confirmations {
        &self.inner.confirmations
    }

    /// SMTP submission: a project's secret key as the password, messages sent as `/v1/send`.
    pub fn submission(&self) -> &crate::services::submission::Submission {
        &self.inner.submission
    }

    /// The workflow engine (manual starts).
    pub fn campaigns(&self) -> &Campaigns {
        &self.inner.campaigns
    }

    /// The workflow engine.
    pub fn workflows(&self) -> &WorkflowEngine {
        &self.inner.workflows
    }

    /// Sending domains: their records, their checks and the sender rule.
    pub fn sending_domains(&self) -> &SendingDomains {
        &self.inner.sending_domains
    }

    /// Key that signs session tokens.
    pub fn jwt_encoding(&self) -> &EncodingKey {
        &self.inner.jwt_encoding
    }

    /// Key that checks session tokens.
    pub fn jwt_decoding(&self) -> &DecodingKey {
        &self.inner.jwt_decoding
    }
}
