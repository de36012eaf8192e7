//! Library-level tests of what lies below the API.

mod architecture;
mod contract;
mod docs;
mod filter_sql;
pub mod plugins;
mod schema;
mod usage;
