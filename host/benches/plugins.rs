//! Plugin benchmarks (a plain bench binary): instantiate-and-call of built-in steps (p50, p99,
//! calls per second on the machine's cores) and the start-up of `herald serve` with a warm
//! plugin cache.
//!
//! Run: `cargo bench -p herald --bench plugins` (release build). Figures go to
//! `docs/benchmarks.md` under "Plugins".

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::plugins::{Contact, Event, PluginSettings, Plugins, StepInput};
use serde_json::{Value, json};

fn input(config: Value) -> StepInput {
    let Value::Object(data) = json!({ "tier": "gold", "age": 30, "profile": { "city": "Paris" } })
    else {
        unreachable!()
    };
    StepInput {
        config,
        contact: Contact {
            id: "cnt_0190a1b2c3d4e5f60718293a4b5c6d7e".into(),
            email: "ada@example.com".into(),
            subscribed: true,
            created_at: 1_700_000_000_000,
            updated_at: 1_700_000_000_000,
            data,
        },
        event: Some(Event {
            name: "signup".into(),
            data: json!({ "plan": "pro" }),
            created_at: 1_700_000_000_000,
        }),
        context: serde_json::Map::new(),
        history: Vec::new(),
        segments: Vec::new(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(plugins: &Plugins, step: &str, input: &StepInput, n: usize) {
    for _ in 0..200 {
        plugins.run_step(step, input).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        plugins.run_step(step, input).await.unwrap();
        times.push(start.elapsed());
    }
    times.sort();
    println!(
        "{step:<10} instantiate+call, sequential, n={n}: p50 {:>6.1} µs  p99 {:>6.1} µs",
        percentile(&times, 0.50).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
    );
}

async fn throughput(plugins: Arc<Plugins>, step: &'static str, input: StepInput, tasks: usize) {
    let input = Arc::new(input);
    let run_for = Duration::from_secs(3);
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let plugins = plugins.clone();
        let input = input.clone();
        handles.push(tokio::spawn(async move {
            let mut calls = 0u64;
            while start.elapsed() < run_for {
                plugins.run_step(step, &input).await.unwrap();
                calls += 1;
            }
            calls
        }));
    }
    let mut total = 0;
    for handle in handles {
        total += handle.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{step:<10} throughput, {tasks} concurrent callers on {} worker threads: {:.0} calls/s",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        total as f64 / secs
    );
}

fn startup(data: &Path, cache: &Path, runs: usize) {
    let bin = env!("CARGO_BIN_EXE_herald");
    let mut times = Vec::new();
    for run in 0..=runs {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let start = Instant::now();
        let mut child = Command::new(bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data)
            .env("HERALD_PLUGINS__CACHE_DIR", cache)
            .env("HERALD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ready = loop {
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let _ = stream
                    .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut reply = String::new();
                let _ = stream.read_to_string(&mut reply);
                if reply.starts_with("HTTP/1.1 200") {
                    break start.elapsed();
                }
            }
            if start.elapsed() > Duration::from_secs(60) {
                panic!("herald serve did not become ready");
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let _ = child.kill();
        let _ = child.wait();
        if run == 0 {
            println!(
                "serve start-up, first run (creates the database): {:.0} ms",
                ready.as_secs_f64() * 1e3
            );
        } else {
            times.push(ready);
        }
    }
    times.sort();
    println!(
        "serve start-up to ready (GET /health = 200), warm plugin cache, {runs} runs: median {:.0} ms, max {:.0} ms",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let settings = PluginSettings {
            cache_dir: Some(cache.clone()),
            ..PluginSettings::default()
        };
        let start = Instant::now();
        let plugins = Arc::new(Plugins::start(&settings, dir.path()).unwrap());
        println!(
            "Plugins::start, cold cache (compiles {} components): {:.0} ms",
            plugins.list().len(),
            start.elapsed().as_secs_f64() * 1e3
        );
        let start = Instant::now();
        let warm = Plugins::start(&settings, dir.path()).unwrap();
        println!(
            "Plugins::start, warm cache: {:.1} ms (pooling allocator: {})",
            start.elapsed().as_secs_f64() * 1e3,
            warm.runtime().pooling()
        );
        drop(warm);

        let exit = input(json!({ "reason": "done" }));
        let condition = input(
            json!({ "filter": { "logic": "AND", "groups": [{ "filters": [
            { "field": "data.tier", "operator": "equals", "value": "gold" },
            { "field": "event.data.plan", "operator": "equals", "value": "pro" }
        ] }] } }),
        );
        latency(&plugins, "EXIT", &exit, 20_000).await;
        latency(&plugins, "CONDITION", &condition, 20_000).await;
        throughput(plugins.clone(), "EXIT", exit, 8).await;
        throughput(plugins.clone(), "CONDITION", condition, 8).await;
    });
    drop(runtime);
    startup(&dir.path().join("serve"), &cache, 10);
}
