//! The transport of each message of a delivery batch, and failover.
//!
//! An email goes through its `from` domain's transport (the sending domain of that name, else
//! the nearest parent domain whose subdomains send under it), else its project's, else the
//! deployment's default (`plugins.transport`); the store keeps these choices
//! ([`Store::transport_choices`](crate::store::Store::transport_choices)), read once a batch. A
//! batch is handed off as one plugin call per transport.
//!
//! Failover: a message that a transport answers with a transient error, or all the messages of
//! a call that failed (the plugin trapped, timed out, is not loaded), go at once to that
//! transport's `fallback`, the same message (same bytes, same `Message-ID`), and on down the
//! chain (the start refuses cycles). The transport that answered last is the email's; the
//! history entry of its outcome says which transports failed before it.
//!
//! Retry-after: a transient error that says `(retry after N s)` (a provider's `429` with its
//! `Retry-After`) is retried no sooner than N seconds ([`retry_after`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::domain::sending_domain::covering_by;
use crate::plugins::{DeliveryError, OutgoingMessage, Plugins, Receipt};
use crate::store::delivery::TransportChoices;

/// The transport the email from `from_address` goes through among `choices`: its domain's,
/// else its project's; `None` is the deployment's default.
pub fn choose(choices: &TransportChoices, from_address: &str) -> Option<String> {
    let domain = from_address
        .rsplit_once('@')
        .map(|(_, d)| d.trim_end_matches('>').trim().to_ascii_lowercase())
        .unwrap_or_default();
    // The sending domain the address is on: the domain itself, else the nearest parent that
    // lets its subdomains send.
    let covering = covering_by(&domain, &choices.domains, |d| {
        (d.name.as_str(), d.allow_subdomains)
    });
    covering
        .and_then(|d| d.transport.clone())
        .or_else(|| choices.project.clone())
}

/// The seconds a transient error asks to wait before the next try: its `(retry after N s)`.
pub fn retry_after(error: &str) -> Option<Duration> {
    let (_, rest) = error.split_once("(retry after ")?;
    let (n, _) = rest.split_once(" s)")?;
    n.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// How one message's hand-off ended, through the transports it went to.
pub struct Handed {
    /// The transport that answered last.
    pub transport: String,
    /// Its answer, or the failure of its plugin.
    pub outcome: Result<Result<Receipt, DeliveryError>, String>,
    /// The transports that failed it before, each with why (empty without a failover).
    pub failed_over: Vec<(String, String)>,
}

impl Handed {
    /// `failed over from `a` (why) to `b`; ` for the history, or nothing.
    pub fn failover_note(&self) -> String {
        let mut note = String::new();
        for (i, (from, why)) in self.failed_over.iter().enumerate() {
            let to = self
                .failed_over
                .get(i + 1)
                .map_or(self.transport.as_str(), |(next, _)| next.as_str());
            note.push_str(&format!("failed over from `{from}` ({why}) to `{to}`; "));
        }
        note
    }
}

/// Whether an answer hands the message on to a fallback.
fn fails_over(outcome: &Result<Result<Receipt, DeliveryError>, String>) -> bool {
    matches!(outcome, Err(_) | Ok(Err(DeliveryError::Transient(_))))
}

fn why(outcome: &Result<Result<Receipt, DeliveryError>, String>) -> String {
    match outcome {
        Ok(Err(DeliveryError::Transient(reason))) => reason.clone(),
        Err(err) => err.clone(),
        Ok(Err(DeliveryError::Permanent(reason))) => reason.clone(),
        Ok(Ok(_)) => String::new(),
    }
}

/// Hands `messages` off, each to its transport (`None`: the default): one call per transport,
/// the calls of different transports at once, and failovers as the module docs say. One
/// [`Handed`] per message, in order.
pub async fn hand_off(
    plugins: &Plugins,
    messages: Vec<(OutgoingMessage, Option<String>)>,
) -> Vec<Handed> {
    let default = plugins.default_transport().to_string();
    let count = messages.len();
    let mut ends: Vec<Option<Handed>> = (0..count).map(|_| None).collect();
    let mut failed_over: Vec<Vec<(String, String)>> = vec![Vec::new(); count];
    // Messages still to hand off, by transport: (place in the batch, message).
    let mut pending: BTreeMap<String, Vec<(usize, OutgoingMessage)>> = BTreeMap::new();
    for (at, (message, transport)) in messages.into_iter().enumerate() {
        pending
            .entry(transport.unwrap_or_else(|| default.clone()))
            .or_default()
            .push((at, message));
    }
    while !pending.is_empty() {
        let calls = std::mem::take(&mut pending)
            .into_iter()
            .map(|(name, group)| {
                let fallback = plugins.fallback_of(&name).map(str::to_string);
                async move {
                    // Keep the messages for the fallback, when there is one.
                    let kept: Option<Vec<OutgoingMessage>> = fallback
                        .as_ref()
                        .map(|_| group.iter().map(|(_, m)| m.clone()).collect());
                    let places: Vec<usize> = group.iter().map(|(at, _)| *at).collect();
                    let batch: Vec<OutgoingMessage> = group.into_iter().map(|(_, m)| m).collect();
                    let outcomes = deliver(plugins, &name, batch).await;
                    (name, fallback, places, kept, outcomes)
                }
            });
        for (name, fallback, places, kept, outcomes) in futures::future::join_all(calls).await {
            let mut kept = kept.map(|k| k.into_iter());
            for (at, outcome) in places.into_iter().zip(outcomes) {
                let message = kept.as_mut().and_then(Iterator::next);
                match (&fallback, message) {
                    (Some(next), Some(message)) if fails_over(&outcome) => {
                        let reason = why(&outcome);
                        tracing::warn!(email_id = %message.id, from = %name, to = %next, error = %reason, "failing over to the fallback transport");
                        metrics::counter!("herald_transport_failovers_total", "transport" => name.clone())
                            .increment(1);
                        failed_over[at].push((name.clone(), reason));
                        pending.entry(next.clone()).or_default().push((at, message));
                    }
                    _ => {
                        ends[at] = Some(Handed {
                            transport: name.clone(),
                            outcome,
                            failed_over: std::mem::take(&mut failed_over[at]),
                        });
                    }
                }
            }
        }
    }
    ends.into_iter()
        .map(|end| end.expect("every message ends"))
        .collect()
}

/// One call of the transport `name` for `batch`: one answer per message, a failure of the call
/// repeated for each.
async fn deliver(
    plugins: &Plugins,
    name: &str,
    batch: Vec<OutgoingMessage>,
) -> Vec<Result<Result<Receipt, DeliveryError>, String>> {
    let count = batch.len();
    let started = std::time::Instant::now();
    let delivered = plugins.deliver_batch(Some(name), batch).await;
    metrics::histogram!("herald_transport_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("herald_delivery_batch_size").record(count as f64);
    match delivered {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(err) => {
            tracing::warn!(transport = %name, error = %err, emails = count, "the transport plugin failed");
            (0..count).map(|_| Err(err.to_string())).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::delivery::DomainTransport;

    #[test]
    fn retry_after_reads_the_convention() {
        assert_eq!(
            retry_after("rate limited by Postmark (retry after 30 s)"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after("451 4.3.0 try again later"), None);
        assert_eq!(retry_after("(retry after soon s)"), None);
    }

    #[test]
    fn the_domain_chooses_before_the_project() {
        let domain = |name: &str, subs: bool, t: Option<&str>| DomainTransport {
            name: name.into(),
            allow_subdomains: subs,
            transport: t.map(str::to_string),
        };
        let choices = TransportChoices {
            project: Some("p".into()),
            domains: vec![
                domain("acme.test", true, Some("d")),
                domain("plain.test", false, None),
                domain("news.acme.test", false, None),
            ],
        };
        assert_eq!(choose(&choices, "a@acme.test").as_deref(), Some("d"));
        assert_eq!(choose(&choices, "a@mail.acme.test").as_deref(), Some("d"));
        // The exact domain names no transport: the project's.
        assert_eq!(choose(&choices, "a@news.acme.test").as_deref(), Some("p"));
        assert_eq!(choose(&choices, "a@plain.test").as_deref(), Some("p"));
        assert_eq!(choose(&choices, "a@other.test").as_deref(), Some("p"));
        let none = TransportChoices::default();
        assert_eq!(choose(&none, "a@acme.test"), None);
    }
}
