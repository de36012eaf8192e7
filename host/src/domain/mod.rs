//! Domain types and rules: what a request becomes once parsed at the edge. No I/O here.

pub mod contact;
pub mod custom_data;
pub mod email;
pub mod event;
pub mod ids;
pub mod keys;
pub mod pagination;
pub mod password;
pub mod project;
pub mod segment;
pub mod send;
pub mod sending_domain;
pub mod template;
pub mod time;
pub mod verification;
pub mod workflow;
