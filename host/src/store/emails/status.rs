//! Statuses of an email, in the order they progress.

/// Waiting for its hand-off to the transport.
pub const QUEUED: &str = "queued";
/// Accepted by the transport.
pub const SENT: &str = "sent";
/// Accepted by the recipient's server.
pub const DELIVERED: &str = "delivered";
/// Opened.
pub const OPENED: &str = "opened";
/// A link was clicked.
pub const CLICKED: &str = "clicked";
/// Bounced.
pub const BOUNCED: &str = "bounced";
/// Marked as spam.
pub const COMPLAINED: &str = "complained";
/// Could not be delivered.
pub const FAILED: &str = "failed";
/// Never handed to the transport: the recipient is on the project's suppression list, or
/// marketing mail to an unsubscribed contact.
pub const SUPPRESSED: &str = "suppressed";

/// How far along a status is; a later event never moves an email back.
pub fn rank(s: &str) -> u8 {
    match s {
        QUEUED => 0,
        SENT => 1,
        DELIVERED => 2,
        OPENED => 3,
        CLICKED => 4,
        BOUNCED | COMPLAINED | FAILED | SUPPRESSED => 5,
        _ => 0,
    }
}
