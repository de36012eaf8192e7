//! Builds the dashboard (`web/`, with npm, into `web/dist`, which `src/api/dashboard.rs` embeds),
//! then the built-in plugins (`plugins/`), the test-only plugins and the SDK's examples for
//! `wasm32-wasip2` and leaves the components in `OUT_DIR`, where `src/plugins/builtin.rs` embeds
//! them. The guest crates live outside this workspace; they are built by a nested `cargo` with
//! its own target directory (`target/plugins`) and a clean environment, so nothing of the outer
//! build (profile, flags, wrappers such as clippy) leaks into them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The runtime's compile settings, this very file (see its docs).
#[path = "src/plugins/engine_config.rs"]
mod engine_config;

/// Components built for the tests only; every other one is a built-in plugin
/// (`host/src/plugins/builtin.rs`), compiled ahead of time so that no start of `herald` compiles it.
const TEST_ONLY: [&str; 3] = ["test-hostile", "hello-step", "hello-transport"];

/// Environment variables passed to the nested cargo; everything else is cleared.
const KEEP_ENV: [&str; 16] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "CARGO_NET_OFFLINE",
    "CARGO_HTTP_PROXY",
    "CARGO_REGISTRIES_CRATES_IO_PROTOCOL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
];

/// One nested build: a manifest, its packages (one world per build, because the SDK's world
/// features must not unify) and the components it produces.
struct Group {
    manifest: &'static str,
    packages: &'static [&'static str],
}

const GROUPS: [Group; 6] = [
    Group {
        manifest: "plugins/Cargo.toml",
        packages: &[
            "step-send-email",
            "step-delay",
            "step-wait-for-event",
            "step-condition",
            "step-webhook",
            "step-update-contact",
            "step-exit",
            "test-hostile",
        ],
    },
    Group {
        manifest: "plugins/Cargo.toml",
        packages: &[
            "transport-outbox",
            "transport-smtp",
            "transport-mailgun",
            "transport-sendgrid",
            "transport-postmark",
            "transport-resend",
            "transport-ses",
        ],
    },
    Group {
        manifest: "plugins/Cargo.toml",
        packages: &["dns-verifier-default"],
    },
    Group {
        manifest: "plugins/Cargo.toml",
        packages: &["billing-none", "billing-stripe"],
    },
    Group {
        manifest: "sdk/examples/hello-step/Cargo.toml",
        packages: &["hello-step"],
    },
    Group {
        manifest: "sdk/examples/hello-transport/Cargo.toml",
        packages: &["hello-transport"],
    },
];

fn cargo(root: &Path, target_dir: &Path, group: &Group) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.env_clear();
    for key in KEEP_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    cmd.current_dir(root)
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg("wasm32-wasip2")
        .arg("--manifest-path")
        .arg(root.join(group.manifest))
        .arg("--target-dir")
        .arg(target_dir);
    for package in group.packages {
        cmd.arg("-p").arg(package);
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo for the plugins: {e}"));
    if !output.status.success() {
        panic!(
            "building the plugins ({}) failed:\n{}",
            group.packages.join(", "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Makes sure the toolchain has the standard library for `wasm32-wasip2`: `rust-toolchain.toml`
/// names the target, but rustup installs listed targets only when it installs the toolchain
/// itself, not when the pinned version was already there. A fresh machine must need no manual
/// step, so the target is added here when it is missing.
fn ensure_wasm_target() {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string()));
    let installed = sysroot
        .as_ref()
        .is_some_and(|root| root.join("lib/rustlib/wasm32-wasip2/lib").is_dir());
    if installed {
        return;
    }
    let mut cmd = Command::new("rustup");
    if let Some(toolchain) = std::env::var_os("RUSTUP_TOOLCHAIN") {
        cmd.env("RUSTUP_TOOLCHAIN", toolchain);
    }
    match cmd.args(["target", "add", "wasm32-wasip2"]).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the wasm32-wasip2 target is missing and `rustup target add wasm32-wasip2` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "the wasm32-wasip2 target is missing and rustup cannot be run ({e}); install the target with `rustup target add wasm32-wasip2`"
        ),
    }
}

fn main() {
    ensure_wasm_target();
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let target_dir = root.join("target").join("plugins");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/plugins/engine_config.rs");
    // `filter/` is a path dependency of `step-condition`.
    for dir in ["plugins", "sdk", "filter"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    // `sqlx::migrate!` embeds the migrations, but cargo only sees the files it read: a new one
    // must also rebuild the crate.
    println!(
        "cargo:rerun-if-changed={}",
        root.join("migrations").display()
    );

    build_dashboard(&root.join("web"), &root.join("openapi/openapi.json"));

    for group in &GROUPS {
        cargo(&root, &target_dir, group);
        for package in group.packages {
            let file = format!("{}.wasm", package.replace('-', "_"));
            let built = target_dir.join("wasm32-wasip2").join("release").join(&file);
            std::fs::copy(&built, out_dir.join(&file))
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
        }
    }
    let builtins: Vec<&str> = GROUPS
        .iter()
        .flat_map(|g| g.packages.iter().copied())
        .filter(|p| !TEST_ONLY.contains(p))
        .collect();
    precompile(&out_dir, &builtins);
}

/// Compiles the built-in components with the runtime's default engine settings (no fuel) for
/// this machine, next to the compatibility hash of that engine, which the runtime compares with
/// its own before using them.
fn precompile(out_dir: &Path, packages: &[&str]) {
    let engine = wasmtime::Engine::new(&engine_config::compile_config(false))
        .unwrap_or_else(|e| panic!("cannot create the wasmtime engine: {e:#}"));
    std::thread::scope(|scope| {
        for package in packages {
            let engine = &engine;
            scope.spawn(move || {
                let stem = package.replace('-', "_");
                let wasm = std::fs::read(out_dir.join(format!("{stem}.wasm")))
                    .unwrap_or_else(|e| panic!("cannot read {stem}.wasm: {e}"));
                let compiled = engine
                    .precompile_component(&wasm)
                    .unwrap_or_else(|e| panic!("cannot compile {package}: {e:#}"));
                std::fs::write(out_dir.join(format!("{stem}.cwasm")), compiled)
                    .unwrap_or_else(|e| panic!("cannot write {stem}.cwasm: {e}"));
            });
        }
    });
    std::fs::write(
        out_dir.join("aot-compatibility"),
        engine_config::compatibility(&engine),
    )
    .unwrap_or_else(|e| panic!("cannot write the compatibility hash: {e}"));
}

/// What the dashboard's build reads: a change to any of them builds it again.
const WEB_INPUTS: [&str; 7] = [
    "src",
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
    "eslint.config.js",
];

/// Builds the dashboard into `web/dist`: `npm ci` when `node_modules` is missing or was installed
/// from another `package-lock.json`, then `npm run build` (the API types generated from
/// `openapi.json`, the type check, Vite). Fails the build, never embeds an empty or stale app,
/// when npm is missing or a step fails.
fn build_dashboard(web: &Path, openapi: &Path) {
    for input in WEB_INPUTS {
        println!("cargo:rerun-if-changed={}", web.join(input).display());
    }
    println!("cargo:rerun-if-changed={}", openapi.display());
    println!("cargo:rerun-if-env-changed=NPM");
    let npm = std::env::var_os("NPM").unwrap_or_else(|| "npm".into());
    match Command::new(&npm).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "npm is needed to build the dashboard (web/) that herald embeds, and `{}` cannot be run; \
             install Node.js 20.19 or later with npm (Debian: `apt-get install nodejs npm`), or name \
             it in the NPM environment variable",
            npm.to_string_lossy()
        ),
    }
    let lock = std::fs::read(web.join("package-lock.json"))
        .unwrap_or_else(|e| panic!("cannot read web/package-lock.json: {e}"));
    // `npm ci` leaves a copy of the lock file it installed from; a different one installs again.
    let installed = web.join("node_modules/.herald-installed-lock.json");
    if std::fs::read(&installed).ok().as_deref() != Some(lock.as_slice()) {
        npm_step(&npm, web, &["ci", "--no-audit", "--no-fund"]);
        std::fs::write(&installed, &lock)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", installed.display()));
    }
    npm_step(&npm, web, &["run", "build"]);
    if !web.join("dist/index.html").is_file() {
        panic!(
            "`npm run build` in web/ left no web/dist/index.html; the dashboard cannot be embedded"
        );
    }
}

fn npm_step(npm: &std::ffi::OsStr, web: &Path, args: &[&str]) {
    let output = Command::new(npm)
        .args(args)
        .current_dir(web)
        .output()
        .unwrap_or_else(|e| panic!("cannot run npm {}: {e}", args.join(" ")));
    if !output.status.success() {
        panic!(
            "`npm {}` in web/ failed (the dashboard herald embeds):\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
