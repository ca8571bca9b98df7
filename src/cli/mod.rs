//! Command-line front end. Every tuning knob is a flag with a default and
//! a unit; invalid values are refused with a clear message and exit code 2.

pub mod report;
pub mod serve;
pub mod watch;

use clap::{Parser, Subcommand};

/// Exit code for refused flags or configuration.
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "pricewire",
    version,
    about = "Low-latency market-data price engine"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the price service (synthetic feed by default).
    Serve(Box<serve::ServeArgs>),
    /// Live terminal view of prices from a running server.
    Watch(watch::WatchArgs),
}

/// Runs a parsed command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    init_logging();
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Watch(args) => watch::run(args),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Prints a refusal and returns [`EXIT_USAGE`].
pub fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("error: {msg}");
    EXIT_USAGE
}
