//! `herald serve` as a child process, on a port it binds itself.
//!
//! A port found free by the test and handed to the child can be taken by another test in
//! between; the child then fails to bind while the other server answers its `/ready`. So the
//! child listens on `127.0.0.1:0` and the test reads the address it bound from its log.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The log line `herald serve` writes once it is bound (target `herald::serve`).
const LISTENING: &str = "herald listening on http://";

/// A running `herald serve`; killed when dropped.
pub struct Served {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: Arc<Mutex<String>>,
    drain: Option<JoinHandle<()>>,
}

impl Served {
    /// Spawns `cmd` (a `herald serve` without `--listen`) on `127.0.0.1:0` and waits until it
    /// answers `/ready`. Its log is read as it comes (the pipe never fills) and kept when
    /// `keep_log`. `HERALD_LOG` is `log` plus the line that names the bound address.
    pub async fn start(mut cmd: Command, log: &str, keep_log: bool) -> Served {
        cmd.args(["--listen", "127.0.0.1:0"])
            .env("HERALD_LOG", format!("{log},herald::serve=info"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let kept = Arc::new(Mutex::new(String::new()));
        let (bound, address) = mpsc::channel();
        let drain = {
            let kept = kept.clone();
            std::thread::spawn(move || {
                let mut bound = Some(bound);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(at) = line.find(LISTENING)
                        && let Some(sender) = bound.take()
                    {
                        let rest = &line[at + LISTENING.len()..];
                        let end = rest
                            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                            .unwrap_or(rest.len());
                        let _ = sender.send(rest[..end].to_string());
                    }
                    if keep_log {
                        let mut kept = kept.lock().unwrap();
                        kept.push_str(&line);
                        kept.push('\n');
                    }
                }
            })
        };
        let mut served = Served {
            child,
            base: String::new(),
            log: kept,
            drain: Some(drain),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let listen = loop {
            match address.try_recv() {
                Ok(listen) => break listen,
                Err(mpsc::TryRecvError::Disconnected) => {
                    let status = served.child.wait().unwrap();
                    panic!(
                        "herald serve exited ({status}) before listening:\n{}",
                        served.log()
                    );
                }
                Err(mpsc::TryRecvError::Empty) if std::time::Instant::now() > deadline => {
                    panic!("herald serve did not listen within 60 s:\n{}", served.log())
                }
                Err(mpsc::TryRecvError::Empty) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
            }
        };
        served.base = format!("http://{listen}");
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(r) = client.get(format!("{}/ready", served.base)).send().await
                && r.status() == 200
            {
                return served;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("herald serve did not become ready:\n{}", served.log());
    }

    /// The log read so far (all of it once the child has exited and [`Served::wait_log`] ran).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the child's log is closed (it has exited) and answers all of it.
    pub fn wait_log(&mut self) -> String {
        if let Some(drain) = self.drain.take() {
            drain.join().unwrap();
        }
        self.log()
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
