//! `fix-sim`: a FIX 4.4 market-data provider simulator on loopback.
//!
//! ```text
//! fix-sim --listen 127.0.0.1:9878 --symbol EUR/USD=1.08120:5 --symbol USD/JPY=149.870:3 --rate 500
//! ```
//! Then type knob commands on stdin, one per line (`rate 100`,
//! `latency 300`, `stall on`, `stall off`, `disconnect`, `refuse on`,
//! `garbage 3`, `broken 1`, `gap 5`, `status`, `quit`); each gets one reply
//! line. The grammar is in `pricewire::feed::fix::sim`.

use std::io::BufRead;
use std::net::SocketAddr;

use anyhow::{bail, Context};
use clap::Parser;
use pricewire::feed::fix::sim::{FixSim, SimConfig, SimSymbol};

#[derive(Debug, Parser)]
#[command(
    name = "fix-sim",
    about = "FIX 4.4 market-data provider simulator (loopback)"
)]
struct Args {
    /// Loopback address to accept initiators on.
    #[arg(long, default_value = "127.0.0.1:9878")]
    listen: SocketAddr,
    /// `PROVIDER_SYMBOL=MID:DIGITS`, repeatable (e.g. `EUR/USD=1.08120:5`).
    #[arg(long = "symbol", required = true)]
    symbols: Vec<String>,
    /// Quotes per second per connection.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// SenderCompID of the simulator.
    #[arg(long, default_value = "LPSIM")]
    sender_comp_id: String,
    /// Spread in points for every symbol.
    #[arg(long, default_value_t = 10)]
    spread_points: i64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn parse_symbol(text: &str, spread: i64) -> anyhow::Result<SimSymbol> {
    let (name, rest) = text.split_once('=').context("expected NAME=MID:DIGITS")?;
    let (mid, digits) = rest.split_once(':').context("expected NAME=MID:DIGITS")?;
    let digits: u8 = digits.parse().context("digits")?;
    if digits > 9 {
        bail!("digits {digits} above 9");
    }
    pricewire::model::price::parse_price(mid, digits).context("mid price")?;
    Ok(SimSymbol::new(name, mid, digits, spread))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let symbols = args
        .symbols
        .iter()
        .map(|s| parse_symbol(s, args.spread_points))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut cfg = SimConfig::new(symbols);
    cfg.listen = args.listen;
    cfg.rate_per_s = args.rate;
    cfg.sender_comp_id = args.sender_comp_id;
    cfg.seed = args.seed;
    let mut sim = FixSim::start(cfg).context("starting the simulator")?;
    println!("fix-sim listening on {}", sim.addr());
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let line = line.trim();
        if line == "quit" {
            break;
        }
        match sim.command(line) {
            Ok(reply) => println!("{reply}"),
            Err(e) => println!("err {e}"),
        }
    }
    sim.shutdown();
    Ok(())
}
