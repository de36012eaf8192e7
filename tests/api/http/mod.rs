//! Black-box tests through the HTTP API (and the `herald` binary), one file per resource.

mod abuse;
pub mod accounts;
mod auth_matrix;
mod billing;
mod campaigns;
mod cli;
mod contacts;
mod document;
pub mod domains;
mod engagement;
pub mod events;
mod executions;
mod hostile;
mod isolation;
pub mod jobs;
mod members;
mod metrics;
mod oauth;
mod protocol;
mod rate_limit;
mod segments;
pub mod send;
mod templates;
mod upgrades;
mod uploads;
mod verify;
mod workflows;
