//! The control port: one command per line (grammar in [`super::toxic`]),
//! one reply line per command, `ok ...` or `err <reason>`. Connections are
//! served one at a time; lines longer than [`LINE_BYTES_MAX`] are refused
//! and the connection closed.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::toxic::Command;
use super::{Shared, POLL_MS};

/// Longest control line accepted.
pub const LINE_BYTES_MAX: usize = 256;

const HELP: &str = "ok commands: toxic latency <ms> [jitter_ms] | toxic bandwidth <bytes_per_s> | \
toxic stall | toxic reset | toxic blackhole | toxic slow_close <ms> | toxic garbage [pct] [max_bytes] | \
toxic clear [name] | status | shutdown";

pub(crate) fn serve(shared: &Arc<Shared>, listener: TcpListener) {
    for incoming in listener.incoming() {
        if shared.stopping() {
            break;
        }
        if let Ok(stream) = incoming {
            let _ = serve_one(shared, stream);
        }
    }
}

/// The reply to one line.
pub(crate) fn reply(shared: &Shared, line: &str) -> String {
    match Command::parse(line) {
        Ok(Command::Help) => HELP.to_string(),
        Ok(Command::Status) => format!("ok {}", shared.status()),
        Ok(cmd) => {
            shared.apply(cmd);
            format!("ok toxics={}", shared.toxics())
        }
        Err(reason) => format!("err {reason}"),
    }
}

fn serve_one(shared: &Shared, stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(POLL_MS)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::with_capacity(LINE_BYTES_MAX);
    while !shared.stopping() {
        // `read_until` keeps what it read before a timeout in `line`.
        let room = (LINE_BYTES_MAX + 1 - line.len()) as u64;
        match (&mut reader).take(room).read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) if line.ends_with(b"\n") => {
                let text = String::from_utf8_lossy(&line).into_owned();
                writeln!(writer, "{}", reply(shared, text.trim()))?;
                line.clear();
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
        if line.len() > LINE_BYTES_MAX {
            writeln!(writer, "err line longer than {LINE_BYTES_MAX} bytes")?;
            return Ok(());
        }
    }
    Ok(())
}
