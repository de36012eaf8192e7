//! The `herald` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use herald::config::Settings;
use herald::store::Db;

/// Herald: email delivery and contact engagement.
#[derive(Parser)]
#[command(name = "herald", version, about)]
struct Cli {
    /// A TOML settings file (also `HERALD_CONFIG`).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Default)]
struct DbArgs {
    /// Directory for the SQLite database and other files [default: ./data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// `sqlite://PATH` or `postgres://…` [default: sqlite://<data-dir>/herald.db].
    #[arg(long)]
    database_url: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (applies migrations first).
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080].
        #[arg(long)]
        listen: Option<String>,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Apply database migrations and exit.
    Migrate {
        /// Apply nothing: list the migrations that would run (exits 1 when there are some, 0
        /// when the database is up to date) and those a newer release applied.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Print the OpenAPI document.
    Openapi,
    /// Print every setting in effect and where its value came from (default, file or
    /// environment variable), secrets masked; exits 2 naming the setting when one is unusable.
    Config {
        /// Print JSON (`[{setting, value, source}]`) instead of lines.
        #[arg(long)]
        json: bool,
        /// Print the settings reference (every setting, its variable, default and meaning) as
        /// Markdown instead: `herald config --markdown > docs/settings.md`.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// Inspect the plugins.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Operate on projects.
    Projects {
        #[command(subcommand)]
        command: ProjectsCommand,
    },
    /// Write a consistent copy of a SQLite deployment's database to a new file, while it
    /// serves. (PostgreSQL: use pg_dump; see docs/operating.md, "Backup and restore".)
    Backup {
        /// The file to write; it must not exist.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Replace a SQLite deployment's database with a backup; refused while a server runs on it.
    /// The replaced database is kept beside it as `<name>.before-restore-<time>`.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Create the first owner account and project on an empty database.
    Init {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// The owner's email address.
        #[arg(long, default_value = "admin@herald.local")]
        email: String,
        /// The first project's name.
        #[arg(long, default_value = "Default")]
        project_name: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand)]
enum ProjectsCommand {
    /// Lift the suspension of a project's sending (set by its bounce or complaint rate): new
    /// mail is accepted again. Exits 1 when the project has no suspension in force.
    LiftSuspension {
        /// The project's id (`prj_…`).
        project: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// List the loaded plugins (the built-in ones and those of `plugins.dir`), then the
    /// configured transports (the `[transports.<name>]` tables and the default).
    List {
        /// Print JSON instead of tables: `{ "plugins": [...], "transports": [...] }`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Show what a component file exports and which capabilities it asks for; without a file,
    /// check the deployment: every `PLUGIN` step of a workflow must name a loaded step plugin
    /// (exits 1 and lists the steps that do not).
    Check {
        /// The component (`.wasm`).
        file: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArgs,
    },
}

fn settings(
    cli_config: Option<&PathBuf>,
    db: &DbArgs,
    listen: Option<String>,
) -> anyhow::Result<Settings> {
    let loaded = Settings::load_checked(cli_config.map(|p| p.as_path()))?;
    for variable in &loaded.unknown_variables {
        eprintln!("herald: warning: {variable} is not a setting; it is ignored");
    }
    let mut settings = loaded.settings;
    if let Some(dir) = &db.data_dir {
        settings.data_dir = dir.clone();
    }
    if let Some(url) = &db.database_url {
        settings.database_url = Some(url.clone());
    }
    if let Some(listen) = listen {
        settings.listen = listen;
    }
    Ok(settings)
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Openapi => {
            print!("{}", herald::api::openapi_json());
            Ok(())
        }
        Command::Config { markdown: true, .. } => {
            print!("{}", herald::config::reference::markdown());
            Ok(())
        }
        Command::Config { json, .. } => {
            let loaded = Settings::load_checked(cli.config.as_deref())?;
            let lines = loaded.lines();
            if json {
                println!("{}", serde_json::to_string_pretty(&lines)?);
            } else {
                let width = lines.iter().map(|l| l.setting.len()).max().unwrap_or(0);
                for line in &lines {
                    println!(
                        "{:<width$} = {:<40} # {}",
                        line.setting, line.value, line.source
                    );
                }
                for variable in &loaded.unknown_variables {
                    println!("# {variable} is not a setting; it is ignored");
                }
            }
            Ok(())
        }
        Command::Serve { listen, db } => {
            let settings = settings(cli.config.as_ref(), &db, listen)?;
            let telemetry = herald::telemetry::init(&settings);
            match herald::api::listener::raise_open_files_limit() {
                Some(n) if n < 4096 => tracing::warn!(
                    open_files = n,
                    "the open-files limit is low for a server (raise the hard limit, e.g. \
                     LimitNOFILE= in a systemd unit or --ulimit nofile= for a container)"
                ),
                Some(n) => tracing::debug!(open_files = n, "open-files limit"),
                None => {}
            }
            let url = settings.database_url();
            tracing::info!(database = %redact(&url), "opening database and applying migrations");
            let app = herald::app::App::build(settings).await?;
            app.state().plugins().reload_on_sighup();
            // Its own target, so that a log filter can keep this line alone
            // (`HERALD_LOG=warn,herald::serve=info`): tests read the bound port from it.
            tracing::info!(
                target: "herald::serve",
                address = %app.addr(),
                database = app.state().store().db().backend().name(),
                "herald listening on http://{}", app.addr()
            );
            app.run_until_stopped(async {
                herald::app::shutdown_signal().await;
                tracing::info!("shutdown signal received; finishing in-flight requests");
            })
            .await?;
            tracing::info!("stopped");
            telemetry.shutdown();
            Ok(())
        }
        Command::Backup { to, db } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let url = settings.database_url();
            if herald::store::backup::sqlite_path(&url).is_none() {
                anyhow::bail!(
                    "herald backup copies SQLite deployments; for PostgreSQL run \
                     `pg_dump --format=custom --file=herald.dump <database url>` (see docs/operating.md, \
                     \"Backup and restore\")"
                );
            }
            let pool = Db::connect(&url, 2).await?;
            let started = std::time::Instant::now();
            let bytes = pool.backup_to(&to).await;
            pool.close().await;
            let bytes = bytes?;
            println!(
                "backed up {} to {} ({bytes} bytes in {:.2} s)",
                redact(&url),
                to.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::Restore { from, db } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let url = settings.database_url();
            let Some(path) = herald::store::backup::sqlite_path(&url) else {
                anyhow::bail!(
                    "herald restore restores SQLite deployments; for PostgreSQL run \
                     `pg_restore --clean --if-exists --dbname=<database url> herald.dump`"
                );
            };
            let kept = herald::store::backup::restore(&from, &path).await?;
            println!("restored {} to {}", from.display(), path.display());
            if let Some(kept) = kept {
                println!("the replaced database is kept as {}", kept.display());
            }
            Ok(())
        }
        Command::Projects {
            command: ProjectsCommand::LiftSuspension { project, db },
        } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let id = herald::domain::ids::ProjectId::parse(&project)
                .ok_or_else(|| anyhow::anyhow!("`{project}` is not a project id (prj_…)"))?;
            let pool = Db::connect(&settings.database_url(), 2).await?;
            pool.migrate().await?;
            let lifted = herald::store::Store::new(pool.clone())
                .lift_suspension(&id)
                .await?;
            pool.close().await;
            if lifted {
                println!("lifted: project {project} may send again");
                Ok(())
            } else {
                anyhow::bail!("project {project} has no suspension in force")
            }
        }
        Command::Plugins { command } => {
            let db = match &command {
                PluginsCommand::List { db, .. } | PluginsCommand::Check { db, .. } => db,
            };
            let settings = settings(cli.config.as_ref(), db, None)?;
            let _telemetry = herald::telemetry::init(&Settings {
                log: "warn".into(),
                ..settings.clone()
            });
            let plugins = herald::plugins::Plugins::start_with_transports(
                &settings.plugins,
                &settings.transports,
                &settings.data_dir,
            )?;
            match command {
                PluginsCommand::List { json, .. } => {
                    let list = plugins.list();
                    let transports = plugins.transport_summaries();
                    if json {
                        let both = serde_json::json!({ "plugins": list, "transports": transports });
                        println!("{}", serde_json::to_string_pretty(&both)?);
                    } else {
                        println!(
                            "{:<16} {:<13} {:<8} {:<24} ORIGIN",
                            "NAME", "WORLD", "VERSION", "GRANTED"
                        );
                        for p in list {
                            println!(
                                "{:<16} {:<13} {:<8} {:<24} {}",
                                p.name,
                                p.world.name(),
                                p.version,
                                if p.granted.is_empty() {
                                    "-".to_string()
                                } else {
                                    p.granted.join(",")
                                },
                                p.origin
                            );
                        }
                        println!();
                        println!(
                            "{:<16} {:<16} {:<16} DEFAULT",
                            "TRANSPORT", "PLUGIN", "FALLBACK"
                        );
                        for t in transports {
                            println!(
                                "{:<16} {:<16} {:<16} {}",
                                t.name,
                                t.plugin,
                                t.fallback.as_deref().unwrap_or("-"),
                                if t.default { "yes" } else { "-" }
                            );
                        }
                    }
                }
                PluginsCommand::Check {
                    file: None, json, ..
                } => {
                    let pool = Db::connect(&settings.database_url(), 2).await?;
                    pool.migrate().await?;
                    let store = herald::store::Store::new(pool.clone());
                    let steps = store.plugin_steps().await?;
                    pool.close().await;
                    let missing: Vec<_> = steps
                        .iter()
                        .filter(|s| {
                            s.plugin.as_deref().is_none_or(|name| {
                                plugins
                                    .step_plugin("PLUGIN", &serde_json::json!({ "plugin": name }))
                                    .is_err()
                            })
                        })
                        .collect();
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&serde_json::json!({
                                "pluginSteps": steps.len(),
                                "missing": missing,
                            }))?
                        );
                    } else if missing.is_empty() {
                        println!(
                            "OK: {} PLUGIN step(s), each names a loaded step plugin",
                            steps.len()
                        );
                    } else {
                        println!(
                            "{} PLUGIN step(s) name no loaded step plugin; they fail when an execution reaches them:",
                            missing.len()
                        );
                        for s in &missing {
                            println!(
                                "  project {} workflow {} ({}{}) step {}: plugin {}",
                                s.project_id,
                                s.workflow_id,
                                s.workflow_name,
                                if s.enabled { ", enabled" } else { "" },
                                s.step_id,
                                s.plugin.as_deref().unwrap_or("(none named)")
                            );
                        }
                    }
                    if !missing.is_empty() {
                        anyhow::bail!("{} PLUGIN step(s) without their plugin", missing.len());
                    }
                }
                PluginsCommand::Check {
                    file: Some(file),
                    json,
                    ..
                } => {
                    let report = plugins.check_file(&file)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&report)?);
                    } else {
                        println!("{}: OK", file.display());
                        println!(
                            "  world:        {} (herald:plugin@{})",
                            report.world.name(),
                            herald::plugins::WIT_VERSION
                        );
                        println!("  exports:      {}", report.exports.join(", "));
                        println!(
                            "  capabilities: {}",
                            if report.capabilities.is_empty() {
                                "none".to_string()
                            } else {
                                report.capabilities.join(", ")
                            }
                        );
                        println!("  other imports: {}", report.other_imports.join(", "));
                    }
                }
            }
            Ok(())
        }
        Command::Migrate { check: true, db } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let url = settings.database_url();
            let pool = Db::connect(&url, 2).await?;
            let status = pool.migration_status().await;
            pool.close().await;
            let status = status?;
            println!(
                "database {}: {} migrations applied",
                redact(&url),
                status.applied.len()
            );
            for v in &status.newer {
                println!(
                    "  applied by a newer release: {v} (this binary serves it; migrations only add)"
                );
            }
            if status.pending.is_empty() {
                println!("up to date: nothing would run");
                return Ok(());
            }
            println!("would run:");
            for m in &status.pending {
                println!("  {:04} {}", m.version, m.description);
            }
            Err(anyhow::Error::new(Exit(1)))
        }
        Command::Migrate { check: false, db } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let _telemetry = herald::telemetry::init(&settings);
            let url = settings.database_url();
            let pool = Db::connect(&url, 2).await?;
            pool.migrate().await?;
            tracing::info!(database = %redact(&url), "migrations applied");
            pool.close().await;
            Ok(())
        }
        Command::Init {
            json,
            email,
            project_name,
            db,
        } => {
            let settings = settings(cli.config.as_ref(), &db, None)?;
            let _telemetry = herald::telemetry::init(&Settings {
                log: "warn".into(),
                ..settings.clone()
            });
            let pool = Db::connect(&settings.database_url(), 2).await?;
            pool.migrate().await?;
            let store = herald::store::Store::new(pool.clone());
            let out = herald::init::run(&store, &email, &project_name).await?;
            pool.close().await;
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                println!("Herald is initialised.\n");
                println!("  owner email:     {}", out.email);
                println!("  owner password:  {}", out.password);
                println!("  project id:      {}", out.project_id);
                println!("  public key:      {}", out.public_key);
                println!("  secret key:      {}", out.secret_key);
                println!("\nThe password and keys are shown only now; keep them safe.");
            }
            Ok(())
        }
    }
}

/// A quiet exit with this status: the command printed its own answer (e.g. `migrate --check`
/// with migrations to run).
#[derive(Debug)]
struct Exit(u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// Large buffers (a message being built and handed off, its attachments, a request's body) are
/// mapped for themselves and given back to the system when freed. glibc's malloc otherwise raises
/// its mmap threshold to the largest block freed so far (up to 32 MiB), after which such buffers
/// come from the per-thread arenas and stay there: one `/v1/send` of a 10 MB attachment to 50
/// recipients left the server at a 779 MB peak with glibc's default and 368 MB with this
/// (`docs/benchmarks.md`, "Attachments and the allocator").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_large_buffers_back() {
    const THRESHOLD: libc::c_int = 1 << 20;
    // SAFETY: `mallopt` only sets one of malloc's parameters; it is called before the runtime
    // starts any other thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_large_buffers_back() {}

fn main() -> ExitCode {
    give_large_buffers_back();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("herald: could not start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async_main())
}

async fn async_main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if let Some(Exit(code)) = err.downcast_ref::<Exit>() {
                return ExitCode::from(*code);
            }
            if err
                .downcast_ref::<herald::config::SettingsError>()
                .is_some()
            {
                eprintln!("herald: {err}");
                return ExitCode::from(2);
            }
            eprintln!("herald: {err:#}");
            ExitCode::FAILURE
        }
    }
}
