//! Mail benchmarks (a plain bench binary): DKIM signing of a typical message with an RSA-2048
//! key, per signature on one core, beside its ceiling measured in the same run: `openssl speed
//! rsa2048` (sign operations per second on one core), when `openssl` is installed; and the
//! Ed25519 signature a domain may add (RFC 8463 dual-signing); and, as before, the signers it
//! replaced (`ring`, the `rsa` crate) in the same run.
//!
//! Run: `cargo bench -p herald --bench mail` (release build). Figures go to
//! `docs/benchmarks.md` under "DKIM signing".

use std::process::Command;
use std::time::Instant;

use herald::domain::sending_domain::{DkimKey, Ed25519DkimKey};
use herald::mail::dkim::{DkimKey as DkimPrivate, DkimSigner};

const HEADERS: &[&str] = &[
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "MIME-Version",
    "Content-Type",
];

fn message(body_bytes: usize) -> Vec<u8> {
    let mut raw = String::from(
        "From: Acme <hello@acme.test>\r\nTo: ada@example.com\r\nSubject: Your weekly digest\r\n\
         Date: Tue, 24 Nov 2026 03:00:00 +0000\r\nMessage-ID: <eml_0190@acme.test>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n",
    );
    let line = "<p>Hello Ada, here is what happened this week in your projects.</p>\r\n";
    while raw.len() < body_bytes {
        raw.push_str(line);
    }
    raw.into_bytes()
}

/// `openssl speed` RSA-2048 signs per second on one core, if openssl is there.
fn openssl_ceiling() -> Option<f64> {
    let out = Command::new("openssl")
        .args(["speed", "-seconds", "3", "rsa2048"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "rsa 2048 bits 0.000585s 0.000017s   1709.4  58823.5" (sign/s is the third number).
    text.lines()
        .find(|l| l.starts_with("rsa 2048") || l.starts_with("rsa  2048"))
        .and_then(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse::<f64>().ok())
                .nth(1)
        })
}

fn main() {
    let key = DkimKey::generate().expect("key");
    let signer = DkimSigner::default();
    for size in [2_000, 10_000, 100_000] {
        let base = message(size);
        // Warm: the first call parses the key.
        let mut raw = base.clone();
        signer
            .sign(
                &mut raw,
                "acme.test",
                &key.selector,
                DkimPrivate::RsaPem(&key.private_pem),
                HEADERS,
            )
            .unwrap();
        let n = 2_000;
        let start = Instant::now();
        for _ in 0..n {
            let mut raw = base.clone();
            signer
                .sign(
                    &mut raw,
                    "acme.test",
                    &key.selector,
                    DkimPrivate::RsaPem(&key.private_pem),
                    HEADERS,
                )
                .unwrap();
        }
        let per = start.elapsed() / n;
        println!(
            "DKIM RSA-2048 relaxed/relaxed, {size:>6}-byte message, one core: {:>7.1} µs per signature, {:>6.0} signatures/s",
            per.as_secs_f64() * 1e6,
            1.0 / per.as_secs_f64()
        );
    }
    // The second signature of a dual-signed domain.
    let ed = Ed25519DkimKey::generate().expect("Ed25519 key");
    for size in [2_000, 10_000, 100_000] {
        let base = message(size);
        let sign = |raw: &mut Vec<u8>| {
            signer
                .sign(
                    raw,
                    "acme.test",
                    &ed.selector,
                    DkimPrivate::Ed25519Pkcs8(&ed.private_pkcs8),
                    HEADERS,
                )
                .unwrap()
        };
        sign(&mut base.clone());
        let n = 2_000;
        let start = Instant::now();
        for _ in 0..n {
            sign(&mut base.clone());
        }
        let per = start.elapsed() / n;
        println!(
            "DKIM Ed25519-SHA256 relaxed/relaxed, {size:>6}-byte message, one core: {:>7.1} µs per signature, {:>6.0} signatures/s",
            per.as_secs_f64() * 1e6,
            1.0 / per.as_secs_f64()
        );
    }
    // What the previous signer cost: the pure-Rust `rsa` crate (lettre's DKIM), one signature of
    // a SHA-256 digest.
    {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        use rsa::sha2::{Digest, Sha256};
        let private = rsa::RsaPrivateKey::from_pkcs1_pem(&key.private_pem).unwrap();
        let digest = Sha256::digest(b"header and body hashes");
        let n = 200;
        let start = Instant::now();
        for _ in 0..n {
            private
                .sign(rsa::Pkcs1v15Sign::new::<Sha256>(), &digest)
                .unwrap();
        }
        let per = start.elapsed() / n;
        println!(
            "before: the `rsa` crate, one RSA-2048 signature, one core: {:>7.1} µs, {:>6.0} signatures/s",
            per.as_secs_f64() * 1e6,
            1.0 / per.as_secs_f64()
        );
    }
    // The signer before `aws-lc-rs`: `ring`'s RSA-2048 PKCS#1 v1.5 SHA-256 signature of the same
    // 2 kB message's headers and body hash, signed alone.
    {
        use rustls_pki_types::PrivateKeyDer;
        use rustls_pki_types::pem::PemObject;
        let der = PrivateKeyDer::from_pem_slice(key.private_pem.as_bytes()).expect("PEM");
        let pair = match &der {
            PrivateKeyDer::Pkcs1(k) => ring::signature::RsaKeyPair::from_der(k.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(k) => {
                ring::signature::RsaKeyPair::from_pkcs8(k.secret_pkcs8_der())
            }
            _ => panic!("not an RSA key"),
        }
        .expect("ring key");
        let rng = ring::rand::SystemRandom::new();
        let input = message(2_000);
        let mut signature = vec![0; pair.public().modulus_len()];
        let n = 2_000;
        let start = Instant::now();
        for _ in 0..n {
            pair.sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &rng,
                &input,
                &mut signature,
            )
            .expect("ring signs");
        }
        let per = start.elapsed() / n;
        println!(
            "before: `ring`, one RSA-2048 signature of a 2 kB input, one core: {:>7.1} µs, {:>6.0} signatures/s",
            per.as_secs_f64() * 1e6,
            1.0 / per.as_secs_f64()
        );
    }
    match openssl_ceiling() {
        Some(rate) => println!("ceiling, openssl speed rsa2048 (one core): {rate:.0} signs/s"),
        None => println!("ceiling: openssl not found"),
    }
}
