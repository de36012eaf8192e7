//! Time as Herald stores it (unix milliseconds) and shows it (RFC 3339, UTC, milliseconds).

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the unix epoch, now.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Formats stored milliseconds as `2026-01-31T12:00:00.000Z`.
pub fn to_rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}
