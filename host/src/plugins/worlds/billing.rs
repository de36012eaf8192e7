//! The `billing` world: whether billing is on, and checkouts.

use std::sync::Arc;

use tracing::instrument;

use crate::plugins::call::call;
use crate::plugins::registry::LoadedPlugin;
use crate::plugins::types::{BillingError, CheckoutRequest, Session};
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
}
