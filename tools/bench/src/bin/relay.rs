//! `relay`: the floor of the peer benchmarks. Copies each inbound frame
//! to the subscribers of its symbol and nothing else (see
//! `pricewire_bench::relay` for the protocol).
//!
//! Usage: `relay [--listen 127.0.0.1:PORT] [--duration-s S]`.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use pricewire_bench::relay::{self, RelayConfig};

fn main() -> anyhow::Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:7300".parse()?;
    let mut duration_s: u64 = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().context("--listen ADDR")?.parse()?,
            "--duration-s" => duration_s = args.next().context("--duration-s S")?.parse()?,
            other => {
                bail!("unknown argument {other}; usage: relay [--listen ADDR] [--duration-s S]")
            }
        }
    }
    if !listen.ip().is_loopback() {
        bail!("the relay listens on loopback only");
    }
    let handle = relay::spawn(RelayConfig::new(listen))?;
    eprintln!("relay listening on {}", handle.local_addr);
    // Runs until killed (the bench script stops it), or for --duration-s.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    let started = std::time::Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed)
        && (duration_s == 0 || started.elapsed().as_secs() < duration_s)
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let s = &handle.stats;
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "relay: frames in {} out {} dropped {}",
        load(&s.frames_in),
        load(&s.frames_out),
        load(&s.frames_dropped)
    );
    handle.stop();
    Ok(())
}
