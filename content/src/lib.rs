//! Herald's content: what callers send and what is rendered for them, checked and bounded, with
//! no I/O, so that the host and the fuzz targets (`fuzz/`) share one implementation.
//!
//! - [`template`]: the template language (Handlebars with the `??` fallback), compiled and
//!   rendered under size, nesting and loop budgets, and the HTML-to-text of the plain part.
//! - [`email`]: email addresses, parsed and normalised.
//! - [`custom_data`]: the custom data rules of `data` objects.
//! - [`csv`]: contacts CSV files, read row by row.

pub mod csv;
pub mod custom_data;
pub mod email;
pub mod template;
