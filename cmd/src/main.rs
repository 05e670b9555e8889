//! The `kerf` binary: every subcommand (`validate`, `simulate`, `snapshot`, `crds`, `webhook`, `controller`),
//! parsed by `kerf::cli`, with the AWS cloud provider (`kerf-aws`) linked in for `kerf controller`. The only
//! crate that joins the Kubernetes edge and the AWS adapter: neither depends on the other.

use anyhow::Context;
use clap::Parser;
use kerf::cli::{Cli, Command, LogFormat};
use std::process::ExitCode;

mod controller;

// The webhook allocates a JSON tree per review; mimalloc halves what glibc malloc costs there. It is built
// without transparent huge pages (the `no_thp` feature): asking for them made every partly used 2 MiB region
// resident, a third of the controller's memory (docs/performance.md). The `system-allocator` feature keeps
// glibc's, which heap profilers (heaptrack) can see.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log_level);
    match run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Validate(args) => Ok(ExitCode::from(kerf::cli::validate::run(
            &args,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Simulate(args) => Ok(ExitCode::from(kerf::cli::simulate::run(
            &args,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Snapshot(args) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let runtime = runtime()?;
            runtime.block_on(kerf::cli::snapshot::run(
                &args,
                &mut std::io::stdout().lock(),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds(args) => {
            let cel = if args.cel_rules {
                kerf::api::crds::CelRules::With
            } else {
                kerf::api::crds::CelRules::Without
            };
            print!(
                "{}",
                kerf::api::crds::to_yaml(cel).context("rendering the CRDs")?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Webhook(args) => {
            // One TLS provider for the whole process, chosen explicitly.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let runtime = runtime()?;
            runtime.block_on(kerf::cli::webhook::run(&args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Controller(args) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let runtime = runtime()?;
            runtime.block_on(controller::run(&args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Worker threads with room to spare: a launch's future (AWS SDK calls nested in the controller's reconcile) is
/// large in debug builds, and tokio's default 2 MiB stack was found within a few hundred KiB of overflowing.
const WORKER_STACK_BYTES: usize = 8 << 20;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK_BYTES)
        .build()
        .context("starting the async runtime")
}
