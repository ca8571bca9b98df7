//! Loopback helpers for tests that start the real binary.

#![allow(dead_code)] // each test binary uses a different part

use std::net::{SocketAddr, TcpListener};

/// A free loopback address (the port is released before use; the window
/// for another process to take it is tiny on a test machine).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
