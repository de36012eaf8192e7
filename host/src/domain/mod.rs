//! Domain types and rules: what a request becomes once parsed at the edge. No I/O here.
//! Templates, email addresses and the custom data rules live in `herald-content` (shared with
//! the fuzz targets) and are re-exported here under their old paths.

pub use herald_content::{custom_data, email, template};

pub mod billing;
pub mod campaign;
pub mod campaign_ab;
pub mod contact;
pub mod event;
pub mod ids;
pub mod keys;
pub mod locale;
pub mod message;
pub mod pagination;
pub mod password;
pub mod project;
pub mod security;
pub mod segment;
pub mod send;
pub mod sending_domain;
pub mod suppression;
pub mod time;
pub mod topic;
pub mod verification;
pub mod workflow;
