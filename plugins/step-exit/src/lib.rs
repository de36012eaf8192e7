//! The `EXIT` step: ends the execution with an optional reason.

use herald_sdk::step::{Input, Outcome, Output, Step};
use serde::Deserialize;

/// `EXIT { reason? }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    reason: Option<String>,
}

struct Exit;

impl Step for Exit {
    type Config = Config;

    fn run(config: Config, _input: Input) -> Output {
        Output::with(Outcome::Exit {
            reason: config.reason,
        })
    }
}

herald_sdk::export_step!(Exit);
