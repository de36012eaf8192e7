//! Herald: a self-hostable, multi-tenant email delivery and contact engagement service.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of this crate.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod domains;
pub mod events;
pub mod init;
pub mod jobs;
pub mod mail;
pub mod plugins;
pub mod ratelimit;
pub mod sending;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod verify;
