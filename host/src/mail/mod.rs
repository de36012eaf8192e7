//! Mail: building the MIME message of one email, DKIM signing it, and the signed links it
//! carries (unsubscribe, subscribe, preferences, open pixel, click redirects). No I/O here; the
//! transport plugins deliver what this builds. And the other way, `inbound`: what a received
//! message is (a bounce, a complaint, an auto-reply or a person's message).

pub mod dkim;
pub mod inbound;
pub mod links;
pub mod mime;
pub mod tracking;
