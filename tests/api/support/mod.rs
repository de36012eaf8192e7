//! What the tests run against: the harness that starts Herald, and real servers on loopback.

pub mod dnsd;
pub mod harness;
pub mod hellomail;
pub mod httpd;
pub mod oidc;
pub mod postmark;
pub mod provider;
pub mod resend;
pub mod serve;
pub mod smtp_client;
pub mod smtpd;
pub mod stripe;
