//! docs/protocol.md §4.2 (retry floors) and §4.3 (limits and timeouts)
//! state the server's defaults; these tests hold each row to the value
//! the code uses, so a changed default fails here until the doc follows.

use crate::admission::{RetryWindow, ADMISSION_RETRY_WINDOW_DEFAULT};
use crate::gateway::queries::HISTORY_COUNT_MAX;
use crate::gateway::GatewayConfig;
use crate::requests::queue::SHED_RETRY_WINDOW_DEFAULT;
use crate::requests::service::SNAPSHOT_SYMBOLS_MAX;

const DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md"));

/// 16384 → "16,384".
fn n(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn w(r: RetryWindow) -> String {
    format!("{}–{}", n(r.min_ms.into()), n(r.max_ms.into()))
}

fn row(first: &str, second: &str) {
    let want = format!("| {first} | {second} |");
    assert!(
        DOC.contains(&want),
        "docs/protocol.md lacks the row {want:?}"
    );
}

#[test]
fn every_retry_floor_in_the_doc_is_the_code_s() {
    let c = GatewayConfig::default();
    let err = w(c.error_retry);
    for reason in [
        "slow_consumer",
        "protocol_error",
        "logon_timeout",
        "message_flood",
    ] {
        row(&format!("`Disconnect({reason})`"), &err);
    }
    row("`Disconnect(shutdown)`", &w(c.shutdown_retry));
    let busy = w(ADMISSION_RETRY_WINDOW_DEFAULT);
    assert_eq!(c.admission.retry_after, ADMISSION_RETRY_WINDOW_DEFAULT);
    row("`Disconnect(busy)` (connection refused at accept)", &busy);
    row("`LogonRejected(rate_limited)` (logon rate)", &busy);
    row("`LogonRejected(session_limit)`", &busy);
    row(
        "`Reject(rate_limited)`, first Subscribe or SymbolListRequest admission",
        &busy,
    );
    // One to two refills of the rate (admission::refill_retry_ms).
    let refills = |per_s: u32| {
        let ms = 1_000 / u64::from(per_s);
        format!(
            "one to two refills of the rate: {}–{} at the default {per_s} per s",
            ms,
            2 * ms
        )
    };
    row(
        "`Reject(rate_limited)`, connection message rate",
        &refills(c.msg_rate_per_s),
    );
    row(
        "`Reject(rate_limited)`, account request rate",
        &refills(crate::requests::queue::ACCOUNT_RATE_PER_S_DEFAULT),
    );
    let shed = w(SHED_RETRY_WINDOW_DEFAULT);
    row("`Reject(overloaded)`, shed by the request queue", &shed);
    // The ring to the dispatcher refuses with the queue's window
    // (`requests::port`), as do busy workers (`requests::service`).
    row("`Reject(overloaded)`, request ring full", &shed);
    row("`Reject(overloaded)`, request workers busy", &shed);
    row(
        "`LogonRejected(busy)` (the Logon arrived; its verification did not come within the logon timeout)",
        &busy,
    );
}

#[test]
fn every_limit_and_timeout_in_the_doc_is_the_code_s() {
    let c = GatewayConfig::default();
    let ms = |v: u64| format!("{} ms", n(v));
    let logon = format!("{} from connect", ms(c.logon_timeout_ms));
    row("Logon timeout: Logon must arrive within", &logon);
    let frame = format!("{} from its first byte", ms(c.frame_timeout_ms));
    row(
        "Frame timeout: a started frame must be complete within",
        &frame,
    );
    let max = format!("{} bytes", n(c.max_frame_bytes as u64));
    row("Largest frame a client may send", &max);
    row(
        "Heartbeat interval (Logon asks 0)",
        &ms(c.heartbeat_ms.into()),
    );
    let clamp = format!(
        "clamped into {}–{} ms",
        n(c.heartbeat_min_ms.into()),
        n(c.heartbeat_max_ms.into())
    );
    row("Heartbeat interval a Logon may ask for", &clamp);
    let dead = format!("{} heartbeat intervals", c.dead_after_heartbeats);
    row("Dead peer: nothing received for", &dead);
    let rate = format!(
        "{} per s, burst {}",
        n(c.msg_rate_per_s.into()),
        n(c.msg_burst.into())
    );
    row(
        "Messages per connection (every message, Heartbeats included)",
        &rate,
    );
    let flood = n(c.flood_disconnect_after.into());
    row(
        "Refusals in a row before the flood disconnect (messages the rate refused, and messages refused inside a refusal's `retryAfterMs`, §4.2)",
        &flood,
    );
    let bad = format!(
        "{} within {} of the first",
        c.bad_frame_limit,
        ms(c.bad_frame_window_ms)
    );
    row(
        "Refused frames (bad body, unknown template, unexpected message)",
        &bad,
    );
    let subs = n(c.max_subscriptions as u64);
    row("Subscriptions per session, (symbol, tier) pairs", &subs);
    row(
        "Symbols per SnapshotRequest",
        &n(SNAPSHOT_SYMBOLS_MAX as u64),
    );
    row("Ticks per HistoryResponse", &n(HISTORY_COUNT_MAX.into()));
    let slow = ms(c.slow_consumer_ms);
    row("Outbound buffer above the high-water mark for", &slow);
}
