//! Command-line front end. Every tuning knob is a flag with a default and
//! a unit; invalid values are refused with a clear message and exit code 2.

pub mod config_flags;
pub mod error;
pub use error::ArgsError;

pub mod auth_args;
pub mod bench;
pub mod bus_args;
pub mod bus_security_args;
pub mod gateway_args;
pub mod help;
pub mod logging;
pub mod replay;
pub mod secret;
pub mod serve;
pub mod token;
pub mod watch;

use clap::{Parser, Subcommand};

/// Exit code for refused flags or configuration.
pub const EXIT_USAGE: i32 = 2;

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "pricewire",
    version,
    about = "Low-latency market-data price engine",
    long_about = None
)]
pub struct Cli {
    /// Log lines on stderr: `text` (human) or `json` (one object per line).
    /// Keys of the JSON lines: docs/operations.md § Logs.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = logging::LogFormat::Text,
        value_name = "FORMAT"
    )]
    pub log_format: logging::LogFormat,
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; each variant's doc is its `--help` line.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the price service (synthetic feed by default).
    // Negative numbers reach the flag's parser, which refuses them naming
    // the flag (instead of "unexpected argument '-1'").
    #[command(allow_negative_numbers = true)]
    Serve(Box<serve::ServeArgs>),
    /// Replay captures through the pipeline, or into a server with --to.
    #[command(allow_negative_numbers = true)]
    Replay(replay::ReplayCmd),
    /// Convert tick files (HistData, TrueFX, MT5, Dukascopy, CSV) into a capture.
    Import(ImportCmd),
    /// Inspect captures: cat or stats.
    #[command(subcommand)]
    Capture(crate::capture::cli::CaptureCmd),
    /// Live terminal view of prices from a running server.
    Watch(watch::WatchArgs),
    /// Credentials: `token hash` prints a token's argon2id hash for the
    /// config or Redis (the token is read from stdin, never argv).
    #[command(subcommand)]
    Token(token::TokenCmd),

    /// Latency benchmark against pricewire or a peer (Redis, NATS, relay):
    /// runs the pricewire-bench binary (tools/bench) with these arguments.
    Bench(bench::BenchArgs),
}

/// `pricewire import`.
#[derive(Debug, clap::Args)]
pub struct ImportCmd {
    /// Input files, format and output.
    #[command(flatten)]
    pub import: crate::capture::cli::ImportArgs,
    /// Configuration whose instrument table names and digits apply.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// Runs a parsed command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    logging::init(cli.log_format);
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Import(args) => import(args),
        Command::Bench(args) => bench::run(args),
        Command::Capture(cmd) => match cmd.run(&mut std::io::stdout().lock()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
        Command::Watch(args) => watch::run(args),
        Command::Token(cmd) => token::run(cmd),
    }
}

fn import(args: ImportCmd) -> i32 {
    let config = match &args.config {
        Some(p) => crate::config::Config::load(p, 3),
        None => Ok(crate::config::Config::builtin(3)),
    };
    let config = match config {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    match args
        .import
        .run(&config.table, &mut std::io::stdout().lock())
    {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// Prints a refusal and returns [`EXIT_USAGE`].
pub fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("error: {msg}");
    EXIT_USAGE
}
