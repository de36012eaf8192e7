//! The `transport` world: delivering messages and parsing provider notifications.

use tracing::instrument;

use crate::plugins::bindings::transport::exports::herald::plugin::mail_transport::Notification;
use crate::plugins::call::call;
use crate::plugins::types::{DeliveryError, DeliveryEvent, OutgoingMessage, Receipt};
use crate::plugins::{PluginError, Plugins, World};

/// The built-in provider transports, which verify their provider's own signature on each
/// notification. Every other transport (`smtp`, `outbox`, an external plugin) is authenticated
/// by the shared secret `plugins.notify_secret` (header `x-herald-secret`), which the plugin is
/// given to check. A list of those that may go without the secret, so that a transport this
/// list does not know needs it.
const SELF_AUTHENTICATING: [&str; 5] = ["ses", "postmark", "mailgun", "sendgrid", "resend"];

impl Plugins {
    /// Whether the notifications of the transport `name` (default: `plugins.transport`) need
    /// the shared secret `plugins.notify_secret`: those of `smtp`, `outbox` and external
    /// plugins do (a plugin Herald does not ship gets the secret to check); the built-in
    /// provider transports authenticate their provider's calls by themselves. A named
    /// transport is its plugin's instance: its plugin decides.
    pub fn notifications_need_secret(&self, name: Option<&str>) -> Result<bool, PluginError> {
        let plugin = self.transport(name)?;
        let info = plugin.info();
        Ok(info.origin != "built-in" || !SELF_AUTHENTICATING.contains(&info.name.as_str()))
    }

    /// Delivers a message through the transport `name` (resolved by [`Plugins::transport`];
    /// default: `plugins.transport`). The outer error is the plugin's failure; the inner one is
    /// the transport's answer.
    #[instrument(skip_all, fields(plugin, message = %message.id))]
    pub async fn deliver(
        &self,
        name: Option<&str>,
        message: &OutgoingMessage,
    ) -> Result<Result<Receipt, DeliveryError>, PluginError> {
        let plugin = self.transport(name)?;
        let wit_message = message.into();
        let delivered = call!(
            self,
            &plugin,
            Transport,
            World::Transport,
            herald_plugin_mail_transport.call_deliver(&wit_message)
        )?;
        Ok(delivered.map(Receipt::from).map_err(DeliveryError::from))
    }

    /// Delivers a batch of messages (of one project) in one call of the transport `name`
    /// (resolved by [`Plugins::transport`]; default: `plugins.transport`): one outcome per
    /// message, in order. The outer error is the plugin's failure, which leaves every message of the batch undelivered as far as the
    /// host knows; a plugin that answers a different number of outcomes is such a failure.
    #[instrument(skip_all, fields(plugin, messages = messages.len()))]
    pub async fn deliver_batch(
        &self,
        name: Option<&str>,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<Receipt, DeliveryError>>, PluginError> {
        let plugin = self.transport(name)?;
        let count = messages.len();
        let wit_messages: Vec<_> = messages.into_iter().map(Into::into).collect();
        let delivered = call!(
            self,
            &plugin,
            Transport,
            World::Transport,
            herald_plugin_mail_transport.call_deliver_batch(&wit_messages)
        )?;
        if delivered.len() != count {
            return Err(PluginError::MalformedResult {
                plugin: plugin.info.name.clone(),
                message: format!(
                    "deliver-batch answered {} outcomes for {count} messages",
                    delivered.len()
                ),
            });
        }
        Ok(delivered
            .into_iter()
            .map(|d| d.map(Receipt::from).map_err(DeliveryError::from))
            .collect())
    }

    /// Authenticates and parses an inbound provider notification with the transport `name`
    /// (resolved by [`Plugins::transport`]; default: `plugins.transport`);
    /// `plugins.notify_secret` is passed as the secret. `headers` may carry the pseudo-header
    /// `:query` (the request's raw query string).
    #[instrument(skip_all, fields(plugin))]
    pub async fn parse_notification(
        &self,
        name: Option<&str>,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Result<Vec<DeliveryEvent>, String>, PluginError> {
        let plugin = self.transport(name)?;
        let notification = Notification {
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            body,
            secret: self.runtime.settings.notify_secret.clone(),
        };
        let events = call!(
            self,
            &plugin,
            Transport,
            World::Transport,
            herald_plugin_mail_transport.call_parse_notification(&notification)
        )?;
        Ok(events.map(|events| events.into_iter().map(DeliveryEvent::from).collect()))
    }
}
