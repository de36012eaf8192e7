//! A test-only step that misbehaves on purpose (`config.mode`), to prove the host survives it.
//! Never embedded in the `herald` binary.

use herald_sdk::http::{Request, send};
use herald_sdk::step::{Input, Output, Step};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    mode: String,
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
            "huge" => Output::next().set_context("huge", "x".repeat(24 << 20).into()),
            "panic" => panic!("the hostile step panicked on purpose"),
            "dns" => match herald_sdk::dns::resolve("example.com", herald_sdk::dns::RecordType::A) {
                Ok(v) => Output::next().set_context("dns", v.into()),
                Err(e) => Output::fail(e.to_string()),
            },
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
                    Err(e) => Output::fail(e.to_string()),
                }
            }
            "echo" => Output::next().set_context("email", input.contact.email.into()),
            other => Output::fail(format!("unknown mode {other}")),
        }
    }
}

herald_sdk::export_step!(Hostile);
