//! A test-only step that misbehaves on purpose (`config.mode`), to prove the host survives it.
//! Never embedded in the `herald` binary.

use herald_sdk::bindings::herald::plugin::step_types as wit;
use herald_sdk::http::{Request, send};
use herald_sdk::step::{Effect, Input, Output, Step};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    mode: String,
    /// For mode `dns`: the name and record type to look up.
    name: Option<String>,
    record: Option<String>,
}

struct Hostile;

impl Step for Hostile {
    type Config = Config;

    fn run(config: Config, input: Input) -> Output {
        match config.mode.as_str() {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "huge" => Output::next().set_context("huge", "x".repeat(8 << 20).into()),
            "panic" => panic!("the hostile step panicked on purpose"),
            "dns" => {
                use herald_sdk::dns::RecordType;
                let record = match config.record.as_deref().unwrap_or("A") {
                    "AAAA" => RecordType::Aaaa,
                    "MX" => RecordType::Mx,
                    "TXT" => RecordType::Txt,
                    "CNAME" => RecordType::Cname,
                    "NS" => RecordType::Ns,
                    _ => RecordType::A,
                };
                let name = config.name.as_deref().unwrap_or("example.com");
                match herald_sdk::dns::resolve(name, record) {
                    Ok(v) => Output::next().set_context("dns", v.into()),
                    Err(e) => Output::fail(e.to_string()),
                }
            }
            "smtp" => {
                let envelope = herald_sdk::smtp::Envelope {
                    sender: "a@example.com".into(),
                    recipients: vec!["b@example.com".into()],
                };
                match herald_sdk::smtp::send(&envelope, b"Subject: x\r\n\r\nx\r\n") {
                    Ok(reply) => Output::next().set_context("smtp", reply.into()),
                    Err(e) => Output::fail(e.to_string()),
                }
            }
            "http-loopback" | "http-metadata" | "http-private" => {
                let url = match config.mode.as_str() {
                    "http-loopback" => "http://127.0.0.1:9/",
                    "http-metadata" => "http://169.254.169.254/latest/meta-data/",
                    _ => "http://10.0.0.1/",
                };
                match send(&Request::new("GET", url)) {
                    Ok(r) => Output::next().set_context("status", r.status.into()),
                    Err(e) => Output::fail(herald_sdk::http::describe(&e)),
                }
            }
            "echo" => Output::next().set_context("email", input.contact.email.into()),
            "two-updates" => {
                // Two writes: the host makes them one by one, each in its own transaction.
                let update = |key: &str, value: u32| Effect::UpdateContact {
                    data: Some([(key.to_string(), value.into())].into_iter().collect()),
                    subscribed: None,
                };
                Output::next()
                    .effect(update("first", 1))
                    .effect(update("second", 2))
            }
            "wasi-time" => {
                // What WASI's clocks and randomness give this plugin: the wall clock in
                // milliseconds, and a hash keyed by the standard library's random seed.
                use std::hash::BuildHasher;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                let random = std::collections::hash_map::RandomState::new().hash_one(1u8);
                Output::next()
                    .set_context("now", now.to_string().into())
                    .set_context("random", random.to_string().into())
            }
            other => Output::fail(format!("unknown mode {other}")),
        }
    }
}

/// Exports the step by hand (not with `export_step!`) so that mode `malformed` can answer what
/// the SDK never would: a context value that is not JSON.
struct Raw;

impl herald_sdk::step::__Guest for Raw {
    fn validate(config: String) -> Vec<herald_sdk::bindings::herald::plugin::types::FieldError> {
        herald_sdk::step::__validate::<Hostile>(config)
    }

    fn run(input: wit::StepInput) -> wit::StepResult {
        if input.config.contains("\"malformed\"") {
            return wit::StepResult {
                outcome: wit::Outcome::Continue(None),
                effects: vec![wit::Effect::SetContext(("k".into(), "{not json".into()))],
            };
        }
        herald_sdk::step::__run::<Hostile>(input)
    }
}

herald_sdk::bindings::__export_world!(Raw with_types_in herald_sdk::bindings);
