//! Library-level tests of what lies below the API.

mod architecture;
pub mod plugins;
mod schema;
