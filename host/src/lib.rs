//! Herald: a self-hostable, multi-tenant email delivery and contact engagement service.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of this crate.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod engine;
pub mod i18n;
pub mod init;
pub mod jobs;
pub mod mail;
pub mod outbox;
pub mod plugins;
pub mod services;
pub mod smtp;
pub mod store;
pub mod telemetry;
