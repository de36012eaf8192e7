//! Mail: building the MIME message of one email, DKIM signing it, and the signed links it
//! carries (unsubscribe, subscribe, preferences, open pixel, click redirects). No I/O here; the
//! transport plugins deliver what this builds.

pub mod dkim;
pub mod links;
pub mod mime;
pub mod tracking;
