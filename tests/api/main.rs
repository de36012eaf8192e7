//! Black-box tests: every test starts the real server on a random port with a fresh database
//! (SQLite, or PostgreSQL when `HERALD_TEST_POSTGRES_URL` is set) and talks HTTP to it.

mod accounts;
mod auth_matrix;
mod cli;
mod contacts;
mod dnsd;
mod domains;
mod engagement;
mod events;
mod harness;
mod http;
mod isolation;
mod jobs;
mod plugins;
mod rate_limit;
mod schema;
mod send;
mod smtpd;
mod templates;
mod verify;
