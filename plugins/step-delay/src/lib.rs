//! The `DELAY` step: waits `amount` minutes, hours or days (0 to 365 days; 0 continues at once,
//! through the queue).

use herald_sdk::config::FieldError;
use herald_sdk::step::{Input, Outcome, Output, Step};
use serde::Deserialize;

const MAX_MS: u64 = 365 * 24 * 60 * 60 * 1000;

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Minutes,
    Hours,
    Days,
}

impl Unit {
    fn millis(self) -> u64 {
        match self {
            Unit::Minutes => 60_000,
            Unit::Hours => 3_600_000,
            Unit::Days => 86_400_000,
        }
    }
}

/// `DELAY { amount, unit }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    amount: u64,
    unit: Unit,
}

struct Delay;

impl Step for Delay {
    type Config = Config;

    fn check(config: &Config) -> Vec<FieldError> {
        if config.amount.saturating_mul(config.unit.millis()) > MAX_MS {
            vec![FieldError::new("amount", "a delay is at most 365 days")]
        } else {
            Vec::new()
        }
    }

    fn run(config: Config, _input: Input) -> Output {
        let now = herald_sdk::clock::now();
        Output::with(Outcome::WaitUntil(
            now + (config.amount * config.unit.millis()) as i64,
        ))
    }
}

herald_sdk::export_step!(Delay);
