//! `pricewire token hash`: reads a token from stdin (a prompt without
//! echo on a terminal; never from the command line, where `ps` and shell
//! history would keep it) and prints its argon2id PHC string for the
//! config file's `token` keys or a Redis account record.

use std::io::{BufRead, Write};

/// `pricewire token`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCmd {
    /// Hash a token read from stdin (or a prompt) for the config or Redis.
    Hash,
}

/// Runs the command; the exit code.
pub fn run(cmd: TokenCmd) -> i32 {
    match cmd {
        TokenCmd::Hash => match read_token().and_then(|t| hash(&t)) {
            Ok(phc) => {
                println!("{phc}");
                0
            }
            Err(e) => {
                eprintln!("error: {e}");
                super::EXIT_USAGE
            }
        },
    }
}

/// Why `pricewire token hash` printed no hash.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Stdin could not be read.
    #[error("reading the token: {0}")]
    Read(#[source] std::io::Error),
    /// The hasher refused the token.
    #[error("{0}")]
    Hash(#[source] super::error::Cause),
}

fn hash(token: &[u8]) -> Result<String, TokenError> {
    crate::auth::hash::hash_token(token).map_err(|e| TokenError::Hash(e.into()))
}

/// One line from stdin, without its line ending; prompted for (echo off)
/// when stdin is a terminal.
fn read_token() -> Result<Vec<u8>, TokenError> {
    let stdin = std::io::stdin();
    let echo_off = crate::runtime::sys::set_echo(&stdin, false).unwrap_or(false);
    if echo_off {
        eprint!("token: ");
        let _ = std::io::stderr().flush();
    }
    let mut line = Vec::new();
    let r = stdin.lock().read_until(b'\n', &mut line);
    if echo_off {
        let _ = crate::runtime::sys::set_echo(&stdin, true);
        eprintln!();
    }
    r.map_err(TokenError::Read)?;
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    Ok(line)
}
