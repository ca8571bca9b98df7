//! fault-proxy: a TCP proxy that injects faults, for drills against
//! pricewire and its dependencies. See docs/resilience.md.
//!
//! ```text
//! fault-proxy --listen 127.0.0.1:9001 --upstream 127.0.0.1:9000 --control 127.0.0.1:9002
//! echo "toxic latency 50 10" | nc -q1 127.0.0.1 9002
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use pricewire::resilience::proxy::{Command, FaultProxy, ProxyConfig, MAX_CONNECTIONS_DEFAULT};

#[derive(Debug, Parser)]
#[command(
    name = "fault-proxy",
    about = "TCP proxy with injectable faults (toxics)"
)]
struct Args {
    /// Loopback address to accept clients on.
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: SocketAddr,
    /// Address to forward to.
    #[arg(long)]
    upstream: SocketAddr,
    /// Loopback address of the line-based control port.
    #[arg(long, default_value = "127.0.0.1:9002")]
    control: SocketAddr,
    /// Connections proxied at once; excess are accepted and closed.
    #[arg(long, default_value_t = MAX_CONNECTIONS_DEFAULT)]
    max_connections: usize,
    /// Seed of the latency-jitter and garbage RNGs.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Toxic to start with, as on the control port (repeatable),
    /// e.g. --toxic "latency 50 10".
    #[arg(long = "toxic")]
    toxics: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut cfg = ProxyConfig::new(args.listen, args.upstream);
    cfg.max_connections = args.max_connections;
    cfg.seed = args.seed;
    let mut startup = Vec::new();
    for t in &args.toxics {
        match Command::parse(&format!("toxic {t}")) {
            Ok(Command::Set(toxic)) => startup.push(toxic),
            Ok(other) => bail!("--toxic {t:?}: not a toxic ({other:?})"),
            Err(reason) => bail!("--toxic {t:?}: {reason}"),
        }
    }
    let mut proxy = FaultProxy::start_with(cfg).context("starting the proxy")?;
    for toxic in startup {
        proxy.set_toxic(toxic);
    }
    let control = proxy
        .serve_control(args.control)
        .context("starting the control port")?;
    println!(
        "fault-proxy {} -> {} (control {}), toxics={}",
        proxy.local_addr(),
        args.upstream,
        control,
        proxy.toxics()
    );
    // The control port's `shutdown` command ends the run.
    while !proxy.is_stopping() {
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("fault-proxy stopping: {}", proxy.status());
    proxy.shutdown();
    Ok(())
}
