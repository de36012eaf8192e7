//! The `dns-verifier` world: the records a sending domain must publish, and their state.

use std::sync::Arc;

use tracing::instrument;

use crate::plugins::call::call;
use crate::plugins::host::LookupError;
use crate::plugins::registry::LoadedPlugin;
use crate::plugins::types::{CheckedRecord, DnsRecord, SendingDomain};
use crate::plugins::{PluginError, Plugins, World};

impl Plugins {
    /// The verifier of `plugins.dns_verifier`.
    fn verifier(&self) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.of_world(&self.runtime.settings.dns_verifier, World::DnsVerifier)
    }

    /// The DNS records a sending domain must publish (from `plugins.dns_verifier`).
    #[instrument(skip_all, fields(plugin, domain = %domain.name))]
    pub async fn domain_records(
        &self,
        domain: &SendingDomain,
    ) -> Result<Vec<DnsRecord>, PluginError> {
        let plugin = self.verifier()?;
        let wit_domain = domain.into();
        let records = call!(
            self,
            &plugin,
            DnsVerifier,
            World::DnsVerifier,
            herald_plugin_domain_verifier.call_records(&wit_domain)
        )?;
        Ok(records.into_iter().map(DnsRecord::from).collect())
    }

    /// Looks a sending domain's records up and reports each one's state.
    #[instrument(skip_all, fields(plugin, domain = %domain.name))]
    pub async fn verify_domain(
        &self,
        domain: &SendingDomain,
    ) -> Result<Vec<CheckedRecord>, PluginError> {
        let plugin = self.verifier()?;
        let wit_domain = domain.into();
        let checked = call!(
            self,
            &plugin,
            DnsVerifier,
            World::DnsVerifier,
            herald_plugin_domain_verifier.call_verify(&wit_domain)
        )?;
        Ok(checked.into_iter().map(CheckedRecord::from).collect())
    }

    /// The TXT values at `name`, through the host's resolver (the one the plugins' `dns`
    /// capability uses): for the records the service checks itself (a domain's Ed25519 key).
    pub async fn resolve_txt(&self, name: &str) -> Result<Vec<String>, LookupError> {
        self.runtime
            .services
            .resolve(name, hickory_resolver::proto::rr::RecordType::TXT)
            .await
    }

    /// The MX values at `name` (`preference host.`), through the host's resolver: for the
    /// inbound MX record of a domain that receives mail, which the service checks itself.
    pub async fn resolve_mx(&self, name: &str) -> Result<Vec<String>, LookupError> {
        self.runtime
            .services
            .resolve(name, hickory_resolver::proto::rr::RecordType::MX)
            .await
    }
}
