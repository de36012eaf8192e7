//! The `transport` world: delivering messages and parsing provider notifications.

use std::sync::Arc;

use tracing::instrument;

use crate::plugins::bindings::transport::exports::herald::plugin::mail_transport::Notification;
use crate::plugins::call::call;
use crate::plugins::registry::LoadedPlugin;
use crate::plugins::types::{DeliveryError, DeliveryEvent, OutgoingMessage, Receipt};
use crate::plugins::{PluginError, Plugins, World};

impl Plugins {
    /// The transport `name`, or `plugins.transport`.
    fn transport(&self, name: Option<&str>) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.of_world(
            name.unwrap_or(&self.runtime.settings.transport),
            World::Transport,
        )
    }

    /// Delivers a message through the transport `name` (default: `plugins.transport`). The
    /// outer error is the plugin's failure; the inner one is the transport's answer.
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

    /// Authenticates and parses an inbound provider notification with the transport `name`
    /// (default: `plugins.transport`); `plugins.notify_secret` is passed as the secret.
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
