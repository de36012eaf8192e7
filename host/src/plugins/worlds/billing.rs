//! The `billing` world: whether billing is on, checkouts, the portal, invoices and webhooks.

use std::sync::Arc;

use tracing::instrument;

use crate::plugins::call::call;
use crate::plugins::registry::LoadedPlugin;
use crate::plugins::types::{
    BillingError, BillingEvent, CheckoutRequest, Invoice, Session, Webhook,
};
use crate::plugins::{PluginError, Plugins, World};

impl Plugins {
    /// The billing plugin of `plugins.billing`.
    fn billing(&self) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.of_world(&self.runtime.settings.billing, World::Billing)
    }

    /// Whether billing is on (`plugins.billing`).
    #[instrument(skip_all, fields(plugin))]
    pub async fn billing_enabled(&self) -> Result<bool, PluginError> {
        let plugin = self.billing()?;
        call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_enabled()
        )
    }

    /// Starts a checkout with the billing plugin.
    #[instrument(skip_all, fields(plugin, project = %request.project_id))]
    pub async fn billing_checkout(
        &self,
        request: &CheckoutRequest,
    ) -> Result<Result<Session, BillingError>, PluginError> {
        let plugin = self.billing()?;
        let wit_request = request.into();
        let session = call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_checkout(&wit_request)
        )?;
        Ok(session.map(Session::from).map_err(BillingError::from))
    }

    /// Opens the billing portal of a project.
    #[instrument(skip_all, fields(plugin, project = %project_id))]
    pub async fn billing_portal(
        &self,
        project_id: &str,
        return_url: &str,
    ) -> Result<Result<Session, BillingError>, PluginError> {
        let plugin = self.billing()?;
        let session = call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_portal(project_id, return_url)
        )?;
        Ok(session.map(Session::from).map_err(BillingError::from))
    }

    /// A project's invoices, newest first.
    #[instrument(skip_all, fields(plugin, project = %project_id))]
    pub async fn billing_invoices(
        &self,
        project_id: &str,
    ) -> Result<Result<Vec<Invoice>, BillingError>, PluginError> {
        let plugin = self.billing()?;
        let invoices = call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_invoices(project_id)
        )?;
        Ok(invoices
            .map(|list| list.into_iter().map(Invoice::from).collect())
            .map_err(BillingError::from))
    }

    /// Authenticates and parses a payment provider's webhook.
    #[instrument(skip_all, fields(plugin))]
    pub async fn billing_parse_webhook(
        &self,
        webhook: &Webhook,
    ) -> Result<Result<Vec<BillingEvent>, BillingError>, PluginError> {
        let plugin = self.billing()?;
        let wit_webhook = webhook.into();
        let events = call!(
            self,
            &plugin,
            Billing,
            World::Billing,
            herald_plugin_billing_provider.call_parse_webhook(&wit_webhook)
        )?;
        Ok(events
            .map(|list| list.into_iter().map(BillingEvent::from).collect())
            .map_err(BillingError::from))
    }
}
