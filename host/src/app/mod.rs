//! Building and running Herald: the one place that wires the store, the plugins, the services,
//! the job handlers and the event consumers together, after zero2prod's `startup.rs`
//! (`Application::build`, `run_until_stopped`) and Vector's topology (check, build, run).
//!
//! [`App::build`] starts the plugin platform, opens and migrates the database, builds every
//! service, registers the job handlers on the queue and the consumers on the outbox dispatcher,
//! and binds the listener. [`App::run_until_stopped`] serves HTTP and runs the job workers, the
//! dispatcher and periodic maintenance until its stop signal, then shuts them down in order.
//! `herald serve` and the tests both start Herald this way; the queue and the dispatcher only
//! run what they are given here.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{DecodingKey, EncodingKey};
use poem::listener::{Acceptor, Listener, TcpListener};
use tokio::sync::{oneshot, watch};

pub use crate::api::AppState;
use crate::api::state::Parts;
use crate::config::Settings;
use crate::engine::LiveSegments;
use crate::engine::campaigns::{CampaignJobs, Campaigns};
use crate::engine::workflows::{StepRunner, WorkflowEngine, WorkflowTriggers};
use crate::jobs::deliver::Deliveries;
use crate::jobs::domains::{CheckIntervals, DomainChecks};
use crate::jobs::segments::{ReevaluateSegments, next_reevaluation};
use crate::jobs::{JobHandler, JobQueue, QueueConfig, Workers};
use crate::mail::dkim::DkimSigner;
use crate::mail::links::LinkSigner;
use crate::outbox::{EventConsumer, EventDispatcher, OutboxWake};
use crate::plugins::Plugins;
use crate::services::ratelimit::RateLimiter;
use crate::services::send_plan::SendPlanner;
use crate::services::sending::Sending;
use crate::services::sending_domains::{DomainPolicy, SendingDomains};
use crate::services::verification::Verifier;
use crate::store::{Db, Store, StoreError};

/// How often periodic maintenance (pruning counters and old keys) runs.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(60);

/// What [`App::build`] builds from, plus consumers registered from outside (the tests').
pub struct AppBuilder {
    settings: Settings,
    consumers: Vec<Arc<dyn EventConsumer>>,
}

impl AppBuilder {
    /// Registers `consumer` on the outbox dispatcher.
    pub fn consumer(mut self, consumer: Arc<dyn EventConsumer>) -> AppBuilder {
        self.consumers.push(consumer);
        self
    }

    /// Starts the plugin platform, opens the database, applies migrations, builds the services,
    /// the job queue with its handlers and the dispatcher with its consumers, and binds the
    /// listener.
    pub async fn build(self) -> anyhow::Result<App> {
        let AppBuilder {
            settings,
            consumers,
        } = self;
        if settings.domains.allow_unverified {
            tracing::warn!(
                "domains.allow_unverified is ON: mail may be sent from domains that are not verified, \
                 unsigned. This is for development only; never run production like this."
            );
        }
        let plugin_settings = settings.plugins.clone();
        let transports = settings.transports.clone();
        let data_dir = settings.data_dir.clone();
        // Loading compiles (or reads from the cache) every component: blocking work.
        let plugins = tokio::task::spawn_blocking(move || {
            Plugins::start_with_transports(&plugin_settings, &transports, &data_dir)
        })
        .await??;
        // A transport, DNS verifier or billing plugin that is not there stops the start.
        plugins
            .check_setup()
            .map_err(|e| crate::config::SettingsError::Unusable {
                setting: e.setting,
                message: e.message,
            })?;
        let plugins = Arc::new(plugins);
        tracing::info!(loaded = plugins.list().len(), "plugins ready");
        // A restore refuses to replace the database of a running server: while this one runs it
        // holds a shared lock on `<database>.lock`.
        let serve_lock = match crate::store::backup::sqlite_path(&settings.database_url()) {
            Some(path) => Some(crate::store::backup::ServeLock::acquire(&path)?),
            None => None,
        };
        let statement_timeout = (settings.database_statement_timeout_ms > 0)
            .then(|| Duration::from_millis(settings.database_statement_timeout_ms));
        let db = Db::connect_with_timeout(
            &settings.database_url(),
            settings.database_max_connections,
            statement_timeout,
        )
        .await?;
        db.migrate().await?;
        let store = Store::new(db).with_limits(crate::store::StoreLimits {
            contact_data_max_bytes: settings.contact_data_max_bytes,
            contact_fields_max: settings.contact_fields_max_per_project,
            event_names_max: settings.event_names_max_per_project,
        });
        let secret = match &settings.jwt_secret {
            Some(s) if !s.is_empty() => s.clone(),
            _ => store.setting_or_init("jwt_secret", random_secret).await?,
        };

        let queue = queue_config(&settings);
        let sending_domains = Arc::new(SendingDomains::new(
            store.clone(),
            plugins.clone(),
            domain_policy(&settings),
        ));
        let jobs = JobQueue::new(store.clone(), queue.clone());
        // Links in sent mail must keep working for as long as the mail exists (RFC 8058), so they
        // have their own key, kept in the database and never rotated with the session secret. A
        // deployment that predates it starts from the session secret its links were signed with.
        let link_secret = store
            .setting_or_init("link_secret", || secret.clone())
            .await?;
        let links = LinkSigner::new(&link_secret, &settings.public_url());
        let sending = Arc::new(
            Sending::new(
                store.clone(),
                links.clone(),
                DkimSigner::default(),
                jobs.clone(),
            )
            .with_hand_off_memory(settings.sending.hand_off_memory_mb)
            .with_render_memory(settings.sending.render_memory_mb),
        );
        let account_mail = crate::services::account_mail::AccountMail::new(
            settings.account_mail_from(),
            settings.accounts.templates_dir.as_deref(),
            jobs.clone(),
        )?;
        let health_guard = crate::services::security::HealthGuard::new(
            store.clone(),
            account_mail.clone(),
            crate::domain::security::Thresholds {
                bounce_rate: settings.security.bounce_rate_threshold,
                complaint_rate: settings.security.complaint_rate_threshold,
                min_volume: settings.security.min_volume,
            },
            Duration::from_secs(settings.security.window_days.max(1) * 86_400),
            settings.dashboard_url(),
        );
        let workflows = WorkflowEngine::new(
            store.clone(),
            plugins.clone(),
            sending.clone(),
            sending_domains.clone(),
            jobs.clone(),
        )
        .with_limits(
            Duration::from_millis(settings.workflows.job_wall_time_ms),
            settings.workflows.webhooks_per_project,
        );
        let campaigns = Campaigns::new(
            store.clone(),
            sending.clone(),
            sending_domains.clone(),
            jobs.clone(),
        );
        let handlers: Vec<Arc<dyn JobHandler>> = vec![
            Arc::new(crate::jobs::import::ImportContacts),
            Arc::new(crate::jobs::bulk::BulkContacts),
            Arc::new(DomainChecks {
                checker: sending_domains.clone(),
                intervals: check_intervals(&settings),
            }),
            Arc::new(crate::jobs::account_mail::AccountMailDeliveries {
                plugins: plugins.clone(),
            }),
            Arc::new(StepRunner {
                engine: workflows.clone(),
            }),
            Arc::new(CampaignJobs {
                campaigns: campaigns.clone(),
            }),
            Arc::new(ReevaluateSegments {
                interval: reevaluate_interval(&settings),
            }),
        ];
        ensure_reevaluation(&store, &settings).await?;
        // Herald's own consumers first, then those registered from outside.
        let outbox_wake = OutboxWake::default();
        let live_segments = Arc::new(LiveSegments::new(store.clone(), outbox_wake.clone()));
        let own: [Arc<dyn EventConsumer>; 2] = [
            live_segments.clone(),
            Arc::new(WorkflowTriggers {
                engine: workflows.clone(),
            }),
        ];
        let consumers: Vec<Arc<dyn EventConsumer>> = own.into_iter().chain(consumers).collect();
        // The dispatcher's claim on a batch of events lasts as long as a job's: after a crash,
        // another instance takes the batch over that much later.
        let dispatcher = EventDispatcher::new(
            store.clone(),
            consumers,
            queue.poll_interval,
            queue.lease,
            outbox_wake,
        );
        let workers = Workers::new(jobs.clone(), handlers);
        let deliveries = Arc::new(Deliveries {
            store: store.clone(),
            plugins: plugins.clone(),
            builder: sending.clone(),
            concurrency: queue.concurrency,
            poll_interval: queue.poll_interval,
            wake: jobs.delivery_wake(),
            per_second: settings.sending.per_project_per_second,
            batch_size: settings.sending.batch_size.clamp(1, 1000) as usize,
            batch_bytes: (settings.plugins.memory_bytes / 4) as usize,
            lease: queue.lease,
            retry_lifetime: Duration::from_secs(settings.sending.retry_lifetime_seconds.max(1)),
            stopped: Default::default(),
        });
        let verifier = Verifier::new(
            &settings.plugins,
            settings.verify_dns_timeout_ms,
            Duration::from_secs(settings.verify_cache_seconds),
        );

        // The SMTP listeners are bound (and their certificates read) with the HTTP one, so that
        // a bad address or certificate stops the start.
        let smtp = crate::smtp::bind(&settings).await?;
        let acceptor = TcpListener::bind(settings.listen.clone())
            .into_acceptor()
            .await
            .map_err(|e| crate::config::SettingsError::Unusable {
                setting: "listen".into(),
                message: format!("cannot listen on {}: {e}", settings.listen),
            })?;
        let acceptor = crate::api::listener::GuardedAcceptor::new(
            acceptor,
            settings.http_max_connections_per_ip,
            Duration::from_secs(settings.http_idle_timeout_seconds),
        );
        let addr = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .ok_or_else(|| anyhow::anyhow!("listener has no socket address"))?;
        if settings.public_url.is_none() {
            // Links in emails must reach this server: without a configured public URL, use the
            // address actually bound (the configured one may say port 0).
            links.use_bound_url(&format!("http://{addr}"));
        }

        // Uploads decode on the same bounded pool as rendering and signing.
        let uploads = uploads(&settings, sending.cpu().clone())?;
        let oauth = crate::services::oauth::OAuth::new(oauth_providers(&settings.oauth));
        if settings.metrics.token.is_some() && crate::api::metrics::install().is_none() {
            tracing::warn!("another metrics recorder is installed; /metrics will fail");
        }
        let engagement = crate::services::engagement::Engagement::new(store.clone());
        let delivery_events = crate::services::delivery_events::DeliveryEvents::new(
            store.clone(),
            health_guard.clone(),
        )
        .with_soft_bounce_rule(crate::domain::suppression::SoftBounceRule::new(
            settings.sending.soft_bounce_limit,
            settings.sending.soft_bounce_days,
        ));
        let rate_limiter = Arc::new(RateLimiter::for_store(&store));
        let submission = crate::services::submission::Submission::new(
            store.clone(),
            SendPlanner::new(store.clone(), sending.clone(), sending_domains.clone()),
            sending.clone(),
            rate_limiter.clone(),
            settings.rate_limit_per_minute,
        );
        let inbound_mail = crate::services::inbound_mail::InboundMail::new(
            store.clone(),
            uploads.clone(),
            links.base().to_string(),
            crate::services::inbound_mail::AttachmentCaps {
                count: settings.uploads.inbound_attachments,
                bytes: settings.uploads.inbound_attachment_bytes,
            },
        );
        let inbound_routes = crate::services::inbound_routes::InboundRoutes::new(store.clone());
        let confirmations = crate::services::confirmation::Confirmations::new(
            store.clone(),
            sending.clone(),
            sending_domains.clone(),
            links.clone(),
            crate::services::confirmation::ConfirmationPolicy {
                pending_days: settings.contacts.pending_days,
                resend_ms: settings.contacts.resend_ms(),
            },
        );
        let state = AppState::new(Parts {
            rate_limiter,
            submission,
            confirmations,
            send_planner: SendPlanner::new(store.clone(), sending.clone(), sending_domains.clone()),
            engagement,
            store,
            jobs,
            plugins,
            verifier,
            links,
            sending,
            sending_domains,
            workflows,
            campaigns,
            account_mail,
            delivery_events,
            health_guard,
            uploads,
            inbound_mail,
            inbound_routes,
            oauth,
            live_segments,
            jwt_encoding: EncodingKey::from_secret(secret.as_bytes()),
            jwt_decoding: DecodingKey::from_secret(secret.as_bytes()),
            settings,
        });
        Ok(App {
            state,
            acceptor,
            addr,
            smtp,
            dispatcher,
            workers,
            deliveries,
            serve_lock,
        })
    }
}

/// Herald built and bound, not yet serving.
pub struct App {
    state: AppState,
    acceptor: crate::api::listener::GuardedAcceptor,
    addr: SocketAddr,
    /// The SMTP listeners (those configured).
    smtp: crate::smtp::SmtpListeners,
    dispatcher: EventDispatcher,
    workers: Workers,
    deliveries: Arc<Deliveries>,
    /// Held until the server stops (SQLite).
    serve_lock: Option<crate::store::backup::ServeLock>,
}

impl App {
    /// A builder, for registering consumers before [`AppBuilder::build`].
    pub fn builder(settings: Settings) -> AppBuilder {
        AppBuilder {
            settings,
            consumers: Vec::new(),
        }
    }

    /// Builds Herald from `settings` (see [`AppBuilder::build`]).
    pub async fn build(settings: Settings) -> anyhow::Result<App> {
        App::builder(settings).build().await
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where its SMTP listeners are bound (those configured).
    pub fn smtp_addrs(&self) -> crate::smtp::SmtpAddrs {
        self.smtp.addrs()
    }

    /// The state it serves.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves HTTP and the SMTP listeners with the job workers, the event dispatcher and
    /// periodic maintenance until `stop` resolves; then stops accepting, waits for in-flight
    /// requests and SMTP sessions (up to `shutdown_grace_seconds`) and running jobs, and closes
    /// the database.
    pub async fn run_until_stopped(
        self,
        stop: impl Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let App {
            state,
            acceptor,
            smtp,
            dispatcher,
            workers,
            deliveries,
            serve_lock: _serve_lock,
            ..
        } = self;
        let grace = Duration::from_secs(state.settings().shutdown_grace_seconds);
        let (stop_tx, stop_rx) = watch::channel(false);
        let maintenance = tokio::spawn(maintain(state.clone(), stop_rx.clone()));
        let working = tokio::spawn(workers.run(stop_rx.clone()));
        let delivering = tokio::spawn(deliveries.run(stop_rx.clone()));
        // Counted opens and clicks are written once more after the last request.
        let counting = tokio::spawn(state.engagement().clone().run(stop_rx.clone()));
        let smtp = smtp.serve(&state, stop_rx.clone());
        let dispatching = tokio::spawn(dispatcher.run(stop_rx));

        let result = poem::Server::new_with_acceptor(acceptor)
            .run_with_graceful_shutdown(
                crate::api::server::routes(state.clone()),
                stop,
                Some(grace),
            )
            .await;
        let _ = stop_tx.send(true);
        joined("maintenance", maintenance.await);
        joined("open and click counts", counting.await);
        let all = async {
            let mut smtp_ended = Vec::new();
            for listener in smtp {
                smtp_ended.push(listener.await);
            }
            (working.await, delivering.await, smtp_ended)
        };
        match tokio::time::timeout(grace, all).await {
            Ok((jobs, deliveries, smtp)) => {
                joined("job workers", jobs);
                joined("delivery workers", deliveries);
                for listener in smtp {
                    joined("SMTP listener", listener);
                }
            }
            Err(_) => tracing::warn!(
                "jobs, deliveries or SMTP sessions still running at shutdown; jobs and \
                 deliveries resume on the next start after their lease"
            ),
        }
        joined("event dispatcher", dispatching.await);
        state.store().db().close().await;
        Ok(result?)
    }

    /// Runs [`App::run_until_stopped`] in a background task until [`RunningServer::stop`].
    pub fn spawn(self) -> RunningServer {
        let (addr, state, smtp) = (self.addr, self.state.clone(), self.smtp.addrs());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until_stopped(async move {
            // A dropped handle stops the server too.
            let _ = rx.await;
        }));
        RunningServer {
            addr,
            smtp,
            state,
            shutdown: Some(tx),
            task,
        }
    }
}

/// Builds Herald from `settings` and serves it in a background task.
pub async fn spawn(settings: Settings) -> anyhow::Result<RunningServer> {
    Ok(App::build(settings).await?.spawn())
}

/// A server running in the background (used by the tests).
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where its SMTP listeners are bound.
    pub smtp: crate::smtp::SmtpAddrs,
    /// The state it serves.
    pub state: AppState,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, waits for in-flight requests and running jobs, closes the database.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            // Fails only when the server already ended; the task says how.
            let _ = tx.send(());
        }
        (&mut self.task).await?
    }
}

/// Periodic maintenance until `stop` turns true: prunes rate-limit windows, idempotency keys,
/// send windows, expired account links (tokens and invitations) and the shared attachments
/// no queued email needs, clears expired pending subscriptions (confirmed opt-in) and the
/// emails' bodies kept for "view in browser" past `sending.view_in_browser_days`, queues the
/// re-evaluation of time-relative segments if no instance has it
/// queued or running (its chain ends when a run fails for good), deletes the jobs that finished
/// more than `jobs_retention_hours` ago, finishes project deletions that were interrupted, and
/// makes due the queued emails an older release
/// queued without a due time during a rolling upgrade (`Store::adopt_undue_emails`).
async fn maintain(state: AppState, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(MAINTENANCE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                state.rate_limiter().prune(state.store()).await;
                if let Err(err) = state.store().prune_idempotency_keys().await {
                    tracing::warn!(error = %err, "could not prune idempotency keys");
                }
                if let Err(err) = state.store().prune_send_windows().await {
                    tracing::warn!(error = %err, "could not prune send windows");
                }
                if let Err(err) = state.store().prune_account_links().await {
                    tracing::warn!(error = %err, "could not prune expired account links");
                }
                if let Err(err) = state.store().prune_email_contents().await {
                    tracing::warn!(error = %err, "could not prune delivered attachments");
                }
                if let Err(err) = state.store().prune_confirmations(crate::domain::time::now_ms()).await {
                    tracing::warn!(error = %err, "could not clear expired pending subscriptions");
                }
                let kept_days = state.settings().sending.view_in_browser_days;
                let before = crate::domain::time::now_ms()
                    .saturating_sub(i64::try_from(kept_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX));
                if let Err(err) = state.store().prune_kept_drafts(before).await {
                    tracing::warn!(error = %err, "could not prune the emails kept for viewing in a browser");
                }
                if let Err(err) = ensure_reevaluation(state.store(), state.settings()).await {
                    tracing::warn!(error = %err, "could not queue the re-evaluation of segments");
                }
                prune_finished_jobs(state.store(), state.settings()).await;
                if let Err(err) = state.store().finish_project_deletions().await {
                    tracing::warn!(error = %err, "could not finish the deletion of projects");
                }
                match state.store().adopt_undue_emails(1000).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(emails = n, "emails queued by an older release are due for delivery");
                        state.jobs().wake_deliveries();
                    }
                    Err(err) => tracing::warn!(error = %err, "could not look for emails queued by an older release"),
                }
            }
            _ = stop.changed() => break,
        }
    }
}

/// Finished jobs deleted a statement: each is a short write (on SQLite the one writer is held
/// for one statement at a time).
const PRUNE_CHUNK: i64 = 2_000;

/// Statements a maintenance round spends on finished jobs at most: 200,000 jobs a minute, far
/// more than a busy instance finishes, so a backlog left by a long pause shrinks round by round
/// without one round running long.
const PRUNE_CHUNKS_PER_ROUND: usize = 100;

/// Deletes the jobs that finished before the retention (`jobs_retention_hours`), a chunk at a
/// time, until none is left or the round's share is spent.
async fn prune_finished_jobs(store: &Store, settings: &Settings) {
    let retention_ms = settings
        .jobs_retention_hours
        .max(1)
        .saturating_mul(3_600_000)
        .min(i64::MAX as u64) as i64;
    let before = crate::domain::time::now_ms().saturating_sub(retention_ms);
    let mut pruned = 0;
    for _ in 0..PRUNE_CHUNKS_PER_ROUND {
        match store.prune_finished_jobs(before, PRUNE_CHUNK).await {
            Ok(n) => {
                pruned += n;
                if n < PRUNE_CHUNK as u64 {
                    break;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not delete finished jobs");
                break;
            }
        }
    }
    if pruned > 0 {
        tracing::debug!(jobs = pruned, "deleted finished jobs past their retention");
    }
}

/// Logs a background task that ended by panicking (or was cancelled).
fn joined(task: &str, result: Result<(), tokio::task::JoinError>) {
    if let Err(err) = result {
        tracing::error!(task, error = %err, "background task failed");
    }
}

/// The job queue's settings.
fn queue_config(settings: &Settings) -> QueueConfig {
    QueueConfig {
        concurrency: settings.jobs_concurrency.max(1),
        poll_interval: Duration::from_millis(settings.jobs_poll_interval_ms.max(10)),
        lease: Duration::from_secs(settings.jobs_lease_seconds.max(1)),
        max_attempts: settings.jobs_max_attempts.max(1),
    }
}

/// Time between periodic re-evaluations of time-relative segments.
fn reevaluate_interval(settings: &Settings) -> Duration {
    Duration::from_secs(settings.segments.reevaluate_interval_seconds.max(1))
}

/// Queues the periodic re-evaluation of time-relative segments, one interval from now, unless
/// it is already queued or running (on any instance of the database).
async fn ensure_reevaluation(store: &Store, settings: &Settings) -> Result<(), StoreError> {
    let next = next_reevaluation(
        reevaluate_interval(settings),
        settings.jobs_max_attempts.max(1),
    );
    if store.queue_singleton_job(&next, None).await? == Some(true) {
        tracing::debug!("queued the re-evaluation of time-relative segments");
    }
    Ok(())
}

/// The sending domains' settings.
fn domain_policy(settings: &Settings) -> DomainPolicy {
    DomainPolicy {
        mail_host: settings.mail_host(),
        spf_include: settings.spf_include(),
        allow_unverified: settings.domains.allow_unverified,
        intervals: check_intervals(settings),
    }
}

/// When domains are checked again.
fn check_intervals(settings: &Settings) -> CheckIntervals {
    CheckIntervals {
        unverified_seconds: settings.domains.check_interval_seconds,
        verified_seconds: settings.domains.verified_check_interval_seconds,
    }
}

fn random_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The OAuth providers of the settings: each one with a client id.
fn oauth_providers(
    settings: &crate::config::OAuthSettings,
) -> Vec<crate::services::oauth::Provider> {
    use crate::services::oauth::{Provider, ProviderKind};
    [
        (ProviderKind::GitHub, &settings.github),
        (ProviderKind::Google, &settings.google),
    ]
    .into_iter()
    .filter_map(|(kind, configured)| {
        let c = configured.as_ref().filter(|c| !c.client_id.is_empty())?;
        Some(Provider {
            kind,
            client_id: c.client_id.clone(),
            client_secret: c.client_secret.clone(),
            authorize_url: c.authorize_url.clone(),
            token_url: c.token_url.clone(),
            userinfo_url: c.userinfo_url.clone(),
        })
    })
    .collect()
}

/// The uploads service of the settings: the data directory's `uploads` folder, or the S3
/// bucket of `uploads.s3_*`.
fn uploads(
    settings: &Settings,
    cpu: crate::services::cpu::CpuPool,
) -> anyhow::Result<crate::services::uploads::Uploads> {
    use crate::config::UploadStorage;
    use crate::services::uploads::{S3Options, Uploads};
    let u = &settings.uploads;
    Ok(match u.storage {
        UploadStorage::Local => Uploads::local(
            settings.data_dir.join("uploads"),
            u.max_bytes,
            u.max_pixels,
            cpu,
        )?,
        UploadStorage::S3 => {
            let bucket = u
                .s3_bucket
                .clone()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!("uploads.storage = \"s3\" needs uploads.s3_bucket")
                })?;
            Uploads::s3(
                &S3Options {
                    bucket,
                    region: u.s3_region.clone(),
                    endpoint: u.s3_endpoint.clone(),
                    access_key_id: u.s3_access_key_id.clone(),
                    secret_access_key: u.s3_secret_access_key.clone(),
                    prefix: u.s3_prefix.clone(),
                    allow_http: u.s3_allow_http,
                },
                u.max_bytes,
                u.max_pixels,
                cpu,
            )?
        }
    })
}
