//! Library-level tests of what lies below the API.

mod architecture;
mod plugins;
mod schema;
mod usage;
