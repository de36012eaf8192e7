//! Library-level tests of what lies below the API.

mod architecture;
mod filter_sql;
mod plugins;
mod schema;
mod usage;
