//! Reactions to what happens to contacts, run after the write that caused them.
//!
//! - [`workflows`]: the workflow engine (triggers, step runs as jobs, waits and resumes).
//! - [`campaigns`]: sending campaigns (snapshot, batches, finish) as durable jobs.
//! - [`segments`]: keeps the stored membership of tracked dynamic segments live (entries and
//!   exits fire when a contact changes or an event is tracked for it, not only on compute). It
//!   is both an outbox consumer ([`LiveSegments`]) and a function the API calls after a contact
//!   write that emits no event ([`reevaluate_contact`]).

pub mod campaigns;
pub mod segments;
pub mod workflows;

pub use segments::{LiveSegments, reevaluate_contact};
