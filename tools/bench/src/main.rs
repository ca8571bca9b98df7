//! `pricewire-bench`: the latency generator (flags in
//! [`pricewire_bench::cli::BenchArgs`]). `pricewire bench ARGS` runs this
//! binary with the same arguments.

use clap::Parser;

/// Latency benchmark against pricewire or a peer (Redis, NATS, relay).
#[derive(Debug, Parser)]
#[command(name = "pricewire-bench", version)]
struct Cli {
    #[command(flatten)]
    args: pricewire_bench::cli::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(pricewire_bench::cli::run(cli.args));
}
