//! The `pricewire` command: serve, watch, replay, import, bench.

use clap::Parser;

fn main() {
    let cli = pricewire::cli::Cli::parse();
    std::process::exit(pricewire::cli::run(cli));
}
