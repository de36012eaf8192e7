//! The services: what the HTTP handlers, the job handlers and (later) the workflow engine call
//! to act. Each is a struct holding exactly the parts it needs (store, plugins, signers, queue),
//! built once by [`crate::app`]; none depends on the HTTP state.

pub mod account_mail;
pub mod compiled_templates;
pub mod confirmation;
pub mod cpu;
pub mod delivery_events;
pub mod engagement;
pub mod inbound_mail;
pub mod inbound_routes;
pub mod oauth;
pub mod ratelimit;
pub mod render_budget;
pub mod security;
pub mod send_plan;
pub mod sending;
pub mod sending_domains;
pub mod sends;
pub mod submission;
pub mod uploads;
pub mod verification;
