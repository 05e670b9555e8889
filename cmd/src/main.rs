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

/// mimalloc's settings for `kerf controller`, through its C API (the Rust crates expose it only with a feature
/// that brings another dependency).
#[cfg(not(feature = "system-allocator"))]
mod allocator {
    use std::os::raw::{c_int, c_long};

    /// `mi_option_purge_delay` of the mimalloc v3 that `libmimalloc-sys` builds (`mimalloc.h`, `mi_option_e`).
    const PURGE_DELAY: c_int = 15;

    extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
    }

    /// Memory freed goes back to the system at once. mimalloc's default waits a second and then only purges on a
    /// later call into the allocator, so a controller idle between decisions kept what its last decision freed
    /// resident: about 15 MiB with 1,000 pending pods (docs/performance.md).
    pub fn purge_at_once() {
        // SAFETY: sets an integer option of the linked allocator; any value is valid for this option.
        unsafe { mi_option_set(PURGE_DELAY, 0) }
    }

    #[cfg(test)]
    mod tests {
        use super::{c_int, c_long, PURGE_DELAY};

        extern "C" {
            fn mi_option_get(option: c_int) -> c_long;
        }

        /// The purge delay in milliseconds.
        fn purge_delay() -> c_long {
            // SAFETY: reads an integer option of the linked allocator.
            unsafe { mi_option_get(PURGE_DELAY) }
        }

        /// The option number is mimalloc's purge delay: its default (1 s, unless MIMALLOC_PURGE_DELAY says
        /// otherwise), then 0.
        #[test]
        fn the_purge_delay_is_set_to_zero() {
            let configured = std::env::var("MIMALLOC_PURGE_DELAY").ok();
            let expected = configured.and_then(|v| v.parse().ok()).unwrap_or(1000);
            assert_eq!(purge_delay(), expected);
            super::purge_at_once();
            assert_eq!(purge_delay(), 0);
        }
    }
}

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
            #[cfg(not(feature = "system-allocator"))]
            allocator::purge_at_once();
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
