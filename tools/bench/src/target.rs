//! The four benchmark targets and their protocols, sans-IO: how a
//! publisher frames a tick, how a subscriber logs on and subscribes, and
//! how its inbound byte stream splits into deliveries.
//!
//! Every target carries the same 76-byte payload: a pricewire PriceUpdate
//! frame ([`PAYLOAD_LEN`]) whose `provider_time_ns` is the tick's scheduled
//! send time (UTC ns) and whose `seq` numbers the ticks of each symbol.
//! pricewire builds that frame itself from a ProviderQuote entry (43 bytes
//! per quote, batched); Redis, NATS and the floor relay carry the 76 bytes
//! verbatim inside their own framing. Parsers never allocate: they borrow
//! the caller's receive buffer and report how many bytes they consumed.

use pricewire::model::price_flags;
use pricewire::wire::{self, Message, PriceBody, QuoteEntry, SymbolRef, PRICE_FRAME_LEN};

/// Bytes of the payload every target delivers (a PriceUpdate frame).
pub const PAYLOAD_LEN: usize = PRICE_FRAME_LEN;

/// Which server is under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// pricewire: provider ingest in, subscriber protocol out.
    Pricewire,
    /// Redis pub/sub: PUBLISH / SUBSCRIBE, one channel per symbol.
    Redis,
    /// NATS core: PUB / SUB, one subject per symbol.
    Nats,
    /// The floor: the `relay` binary copies each inbound frame to its subscribers.
    Floor,
}

impl Target {
    pub const fn name(self) -> &'static str {
        match self {
            Target::Pricewire => "pricewire",
            Target::Redis => "redis",
            Target::Nats => "nats",
            Target::Floor => "floor",
        }
    }
}

/// One tick as the generator sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchTick {
    pub symbol: u16,
    /// Per-symbol tick number, from 1.
    pub seq: u64,
    pub bid: i64,
    pub ask: i64,
    /// Scheduled send time, UTC ns.
    pub scheduled_ns: u64,
}

/// One delivery as a subscriber sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub symbol: u16,
    pub seq: u64,
    pub scheduled_ns: u64,
    /// Flagged stale by the server (its feed went quiet): shown as such,
    /// never as live, so not a latency sample.
    pub stale: bool,
    /// When the engine published it (UTC ns, the serving host's clock; 0
    /// for targets that carry none).
    pub engine_ns: u64,
}

/// Ticks skipped between the last sequence number seen on a connection
/// (0: none yet) and the next one, and the new last: a delivery after a
/// gap counts the ticks in between; a repeated or older one counts none
/// and leaves the last where it was.
pub fn seq_gap(last: u64, seq: u64) -> (u64, u64) {
    let gap = if last != 0 && seq > last + 1 {
        seq - last - 1
    } else {
        0
    };
    (gap, last.max(seq))
}

/// What a subscriber parser found at the front of its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A measured delivery.
    Update(Delivery),
    /// The session is ready for subscriptions (pricewire LogonAccepted,
    /// NATS INFO).
    LoggedOn,
    /// Refused; come back after this many ms (pricewire LogonRejected, or
    /// a Reject of the first Subscribe).
    Rejected { retry_after_ms: u32, at_logon: bool },
    /// Subscriptions acknowledged (one per acknowledgement message).
    Subscribed,
    /// The server wants an answer (NATS PING): write [`pong`].
    Ping,
    /// Anything else (heartbeats, snapshots, +OK, PONG).
    Other,
    /// The server ends the session.
    Closed,
}

/// A malformed inbound stream: the connection is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{target:?} stream malformed: {what}")]
pub struct ParseError {
    pub target: Target,
    pub what: &'static str,
}

/// The 76-byte payload of one tick.
pub fn payload(t: &BenchTick) -> [u8; PAYLOAD_LEN] {
    let body = PriceBody {
        symbol_id: t.symbol,
        digits: 5,
        providers: 1,
        seq: t.seq,
        bid: t.bid,
        ask: t.ask,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: t.scheduled_ns,
        ..PriceBody::default()
    };
    let mut out = [0u8; PAYLOAD_LEN];
    let n = wire::encode_update(&mut out, &body);
    debug_assert_eq!(n, PAYLOAD_LEN);
    out
}

/// The price a frame delivers: a PriceUpdate, or a PriceSnapshot flagged
/// conflated (the latest price sent in place of skipped ones: a slow
/// consumer's catch-up, or a rate-limited subscription's slot under
/// `--max-update-hz`). Its latency runs from the tick it carries; the
/// skipped sequence numbers count as gaps.
fn delivery_of(frame: &[u8]) -> Option<Delivery> {
    let b = match wire::decode(frame) {
        Ok(Message::PriceUpdate(b)) => b,
        Ok(Message::PriceSnapshot(s)) if s.body.flags & price_flags::CONFLATED != 0 => s.body,
        _ => return None,
    };
    Some(Delivery {
        symbol: b.symbol_id,
        seq: b.seq,
        scheduled_ns: b.provider_time_ns,
        stale: b.flags & price_flags::STALE != 0,
        engine_ns: b.engine_time_ns,
    })
}

/// Channel / subject name of a symbol for Redis and NATS.
pub fn channel(symbol: u16, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(out, "s{symbol}");
}

// ---- publishers ----------------------------------------------------------

/// Appends the publish of a batch of ticks to `out` (one write). For
/// pricewire the batch becomes one ProviderQuote frame.
pub fn encode_publish(target: Target, ticks: &[BenchTick], out: &mut Vec<u8>) {
    match target {
        Target::Pricewire => encode_quotes(ticks, out),
        Target::Redis => ticks.iter().for_each(|t| encode_redis_publish(t, out)),
        Target::Nats => ticks.iter().for_each(|t| encode_nats_pub(t, out)),
        Target::Floor => ticks
            .iter()
            .for_each(|t| out.extend_from_slice(&payload(t))),
    }
}

fn encode_quotes(ticks: &[BenchTick], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + 14 + 4 + ticks.len() * 43 + 16, 0);
    let quotes = ticks.iter().map(|t| QuoteEntry {
        symbol_id: t.symbol,
        flags: 0,
        bid: t.bid,
        ask: t.ask,
        bid_size: 1_000_000,
        ask_size: 1_000_000,
        provider_time_ns: t.scheduled_ns,
    });
    let n =
        wire::encode_provider_quote(&mut out[start..], quotes).expect("buffer sized for the batch");
    out.truncate(start + n);
}

fn encode_redis_publish(t: &BenchTick, out: &mut Vec<u8>) {
    use std::io::Write;
    let len = 1 + decimal_digits(t.symbol);
    let _ = write!(out, "*3\r\n$7\r\nPUBLISH\r\n${len}\r\n");
    channel(t.symbol, out);
    let _ = write!(out, "\r\n${PAYLOAD_LEN}\r\n");
    out.extend_from_slice(&payload(t));
    out.extend_from_slice(b"\r\n");
}

fn decimal_digits(n: u16) -> usize {
    match n {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1000..=9999 => 4,
        _ => 5,
    }
}

fn encode_nats_pub(t: &BenchTick, out: &mut Vec<u8>) {
    use std::io::Write;
    out.extend_from_slice(b"PUB ");
    channel(t.symbol, out);
    let _ = write!(out, " {PAYLOAD_LEN}\r\n");
    out.extend_from_slice(&payload(t));
    out.extend_from_slice(b"\r\n");
}

/// What a publisher writes before its first tick; and whether it must
/// wait for one reply frame/line before publishing.
pub fn publisher_hello(target: Target, provider: u16, token: &str, out: &mut Vec<u8>) -> bool {
    match target {
        Target::Pricewire => {
            out.resize(512, 0);
            let m = wire::ProviderLogon {
                provider_id: provider,
                token: token.as_bytes(),
            };
            let n = wire::encode_provider_logon(out, &m).expect("logon fits");
            out.truncate(n);
            true
        }
        // The generator never reads a publisher's replies (its drain thread
        // discards them), so it tells Redis not to send them: one `:N`
        // reply per PUBLISH is write work and a wake-up of the generator
        // that no other target's publisher gets. Measured both ways at
        // 10k ticks/s: Redis's CPU 35 → 26 s per million updates, p50
        // 91 → 74 µs (BENCHMARKS.md, run 12).
        Target::Redis => {
            out.extend_from_slice(REDIS_REPLY_OFF);
            false
        }
        Target::Nats => {
            out.extend_from_slice(NATS_CONNECT);
            false
        }
        Target::Floor => {
            out.push(b'P');
            false
        }
    }
}

const REDIS_REPLY_OFF: &[u8] = b"CLIENT REPLY OFF\r\n";

const NATS_CONNECT: &[u8] =
    b"CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"pricewire-bench\"}\r\n";

// ---- subscribers ---------------------------------------------------------

/// What a subscriber writes right after connecting (pricewire: Logon;
/// NATS: CONNECT + SUBs + PING; Redis: SUBSCRIBE; floor: its symbol list).
/// pricewire subscribes only after LogonAccepted ([`encode_subscribe`]).
pub fn subscriber_hello(target: Target, symbols: &[u16], out: &mut Vec<u8>) {
    match target {
        Target::Pricewire => {
            let start = out.len();
            out.resize(start + 128, 0);
            let m = wire::Logon {
                heartbeat_interval_ms: 0,
                account: b"demo",
                token: b"demo",
            };
            let n = wire::encode_logon(&mut out[start..], &m).expect("logon fits");
            out.truncate(start + n);
        }
        Target::Redis | Target::Nats | Target::Floor => encode_subscribe(target, symbols, out),
    }
}

/// The subscription request for `symbols` (pricewire: tier 0, `raw`).
pub fn encode_subscribe(target: Target, symbols: &[u16], out: &mut Vec<u8>) {
    use std::io::Write;
    match target {
        Target::Pricewire => {
            let start = out.len();
            out.resize(start + 64 + symbols.len() * 18, 0);
            let refs = symbols.iter().map(|&s| SymbolRef::by_id(s));
            let n = wire::encode_subscribe(&mut out[start..], 1, 0, refs).expect("sized");
            out.truncate(start + n);
        }
        Target::Redis => {
            let _ = write!(out, "*{}\r\n$9\r\nSUBSCRIBE\r\n", symbols.len() + 1);
            let mut ch = Vec::with_capacity(8);
            for &s in symbols {
                ch.clear();
                channel(s, &mut ch);
                let _ = write!(out, "${}\r\n", ch.len());
                out.extend_from_slice(&ch);
                out.extend_from_slice(b"\r\n");
            }
        }
        Target::Nats => {
            out.extend_from_slice(NATS_CONNECT);
            for (sid, &s) in symbols.iter().enumerate() {
                out.extend_from_slice(b"SUB ");
                channel(s, out);
                let _ = write!(out, " {}\r\n", sid + 1);
            }
            out.extend_from_slice(b"PING\r\n");
        }
        Target::Floor => {
            out.push(b'S');
            out.extend_from_slice(&(symbols.len() as u16).to_le_bytes());
            symbols
                .iter()
                .for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
        }
    }
}

/// How many [`Event::Subscribed`] a subscriber waits for.
pub fn acks_expected(target: Target, symbols: usize) -> usize {
    match target {
        Target::Redis => symbols,
        Target::Pricewire | Target::Nats => 1,
        Target::Floor => 0,
    }
}

/// The answer to [`Event::Ping`].
pub fn pong() -> &'static [u8] {
    b"PONG\r\n"
}

/// A heartbeat a pricewire subscriber sends while idle (other targets:
/// nothing).
pub fn heartbeat(target: Target, out: &mut Vec<u8>) {
    if target == Target::Pricewire {
        let start = out.len();
        out.resize(start + 16, 0);
        let n = wire::encode_heartbeat(&mut out[start..]).expect("fits");
        out.truncate(start + n);
    }
}

/// Parses one event from the front of `buf`: `Ok(None)` means more bytes
/// are needed, `Ok(Some((event, consumed)))` one event.
pub fn parse(target: Target, buf: &[u8]) -> Result<Option<(Event, usize)>, ParseError> {
    match target {
        Target::Pricewire | Target::Floor => parse_sbe(target, buf),
        Target::Redis => parse_resp(buf),
        Target::Nats => parse_nats(buf),
    }
}

fn parse_sbe(target: Target, buf: &[u8]) -> Result<Option<(Event, usize)>, ParseError> {
    let len = match wire::split_with_max(buf, wire::SERVER_FRAME_LEN_MAX) {
        Ok(Some(n)) => n,
        Ok(None) => return Ok(None),
        Err(_) => {
            return Err(ParseError {
                target,
                what: "bad SOFH",
            })
        }
    };
    let frame = &buf[..len];
    if let Some(d) = delivery_of(frame) {
        return Ok(Some((Event::Update(d), len)));
    }
    let ev = match wire::decode(frame) {
        Ok(Message::LogonAccepted(_)) => Event::LoggedOn,
        Ok(Message::LogonRejected(r)) => Event::Rejected {
            retry_after_ms: r.retry_after_ms,
            at_logon: true,
        },
        Ok(Message::Reject(r)) => Event::Rejected {
            retry_after_ms: r.retry_after_ms,
            at_logon: false,
        },
        Ok(Message::SubscribeResponse(_)) => Event::Subscribed,
        Ok(Message::Disconnect(_)) => Event::Closed,
        _ => Event::Other,
    };
    Ok(Some((ev, len)))
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn parse_usize(b: &[u8]) -> Option<usize> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

const RESP_ERR: ParseError = ParseError {
    target: Target::Redis,
    what: "bad RESP",
};

/// One RESP element at `buf[pos..]`: (content range, next position).
fn resp_element(buf: &[u8], pos: usize) -> Result<Option<(usize, usize, usize)>, ParseError> {
    let Some(rest) = buf.get(pos..) else {
        return Ok(None);
    };
    let Some(eol) = find_crlf(rest) else {
        return Ok(None);
    };
    match rest.first() {
        Some(b':') | Some(b'+') => Ok(Some((pos + 1, pos + eol, pos + eol + 2))),
        Some(b'$') => {
            let n = parse_usize(&rest[1..eol]).ok_or(RESP_ERR)?;
            let start = pos + eol + 2;
            if buf.len() < start + n + 2 {
                return Ok(None);
            }
            Ok(Some((start, start + n, start + n + 2)))
        }
        _ => Err(RESP_ERR),
    }
}

fn parse_resp(buf: &[u8]) -> Result<Option<(Event, usize)>, ParseError> {
    let Some(eol) = find_crlf(buf) else {
        return Ok(None);
    };
    match buf.first() {
        Some(b'*') => {}
        Some(b'-') => return Err(RESP_ERR),
        Some(_) => return Ok(Some((Event::Other, eol + 2))),
        None => return Ok(None),
    }
    let count = parse_usize(&buf[1..eol]).ok_or(RESP_ERR)?;
    let mut pos = eol + 2;
    let mut parts = [(0usize, 0usize); 3];
    for i in 0..count {
        let Some((s, e, next)) = resp_element(buf, pos)? else {
            return Ok(None);
        };
        if let Some(p) = parts.get_mut(i) {
            *p = (s, e);
        }
        pos = next;
    }
    let kind = &buf[parts[0].0..parts[0].1];
    let ev = match kind {
        b"message" if count == 3 => {
            delivery_of(&buf[parts[2].0..parts[2].1]).map_or(Event::Other, Event::Update)
        }
        b"subscribe" => Event::Subscribed,
        _ => Event::Other,
    };
    Ok(Some((ev, pos)))
}

const NATS_ERR: ParseError = ParseError {
    target: Target::Nats,
    what: "bad NATS line",
};

fn parse_nats(buf: &[u8]) -> Result<Option<(Event, usize)>, ParseError> {
    let Some(eol) = find_crlf(buf) else {
        return Ok(None);
    };
    let line = &buf[..eol];
    if line.starts_with(b"MSG ") {
        let size = line
            .rsplit(|&c| c == b' ')
            .next()
            .and_then(parse_usize)
            .ok_or(NATS_ERR)?;
        let start = eol + 2;
        if buf.len() < start + size + 2 {
            return Ok(None);
        }
        let ev = delivery_of(&buf[start..start + size]).map_or(Event::Other, Event::Update);
        return Ok(Some((ev, start + size + 2)));
    }
    let ev = if line.starts_with(b"PING") {
        Event::Ping
    } else if line.starts_with(b"PONG") {
        Event::Subscribed
    } else if line.starts_with(b"INFO") {
        Event::LoggedOn
    } else if line.starts_with(b"-ERR") {
        return Err(NATS_ERR);
    } else {
        Event::Other
    };
    Ok(Some((ev, eol + 2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pricewire::wire::PriceKind;

    fn tick() -> BenchTick {
        BenchTick {
            symbol: 7,
            seq: 42,
            bid: 108_120,
            ask: 108_128,
            scheduled_ns: 1_700_000_000_123_456_789,
        }
    }

    fn want() -> Delivery {
        Delivery {
            symbol: 7,
            seq: 42,
            scheduled_ns: 1_700_000_000_123_456_789,
            stale: false,
            engine_ns: 0,
        }
    }

    #[test]
    fn payload_is_a_76_byte_price_update() {
        let p = payload(&tick());
        assert_eq!(p.len(), 76);
        assert_eq!(delivery_of(&p), Some(want()));
    }

    #[test]
    fn a_conflated_snapshot_is_a_delivery_and_a_plain_one_is_not() {
        let t = tick();
        let mut body = PriceBody {
            symbol_id: t.symbol,
            seq: t.seq,
            provider_time_ns: t.scheduled_ns,
            ..PriceBody::default()
        };
        let mut out = [0u8; wire::PRICE_SLOT_LEN];
        let n = wire::encode_price(&mut out, PriceKind::Snapshot, &body, 1);
        assert_eq!(delivery_of(&out[..n]), None, "a subscribe snapshot");
        body.flags = price_flags::CONFLATED;
        let n = wire::encode_price(&mut out, PriceKind::Snapshot, &body, 1);
        assert_eq!(delivery_of(&out[..n]), Some(want()));
    }

    #[test]
    fn redis_message_push_parses_in_pieces() {
        let p = payload(&tick());
        let mut m = b"*3\r\n$7\r\nmessage\r\n$2\r\ns7\r\n$76\r\n".to_vec();
        m.extend_from_slice(&p);
        m.extend_from_slice(b"\r\n");
        for cut in 0..m.len() {
            assert_eq!(parse(Target::Redis, &m[..cut]), Ok(None), "cut {cut}");
        }
        assert_eq!(
            parse(Target::Redis, &m),
            Ok(Some((Event::Update(want()), m.len())))
        );
        let ack = b"*3\r\n$9\r\nsubscribe\r\n$2\r\ns7\r\n:1\r\n";
        assert_eq!(
            parse(Target::Redis, ack),
            Ok(Some((Event::Subscribed, ack.len())))
        );
    }

    #[test]
    fn nats_msg_ping_and_info_parse() {
        let mut m = b"MSG s7 1 76\r\n".to_vec();
        m.extend_from_slice(&payload(&tick()));
        m.extend_from_slice(b"\r\n");
        assert_eq!(parse(Target::Nats, &m[..m.len() - 1]), Ok(None));
        assert_eq!(
            parse(Target::Nats, &m),
            Ok(Some((Event::Update(want()), m.len())))
        );
        assert_eq!(parse(Target::Nats, b"PING\r\n"), Ok(Some((Event::Ping, 6))));
        assert!(parse(Target::Nats, b"-ERR 'x'\r\n").is_err());
    }

    #[test]
    fn publish_encodings_carry_the_payload() {
        let mut out = Vec::new();
        encode_publish(Target::Nats, &[tick()], &mut out);
        assert!(out.starts_with(b"PUB s7 76\r\n"));
        out.clear();
        encode_publish(Target::Floor, &[tick(), tick()], &mut out);
        assert_eq!(out.len(), 152);
        out.clear();
        encode_publish(Target::Pricewire, &[tick(), tick()], &mut out);
        match wire::decode(&out) {
            Ok(Message::ProviderQuote(q)) => assert_eq!(q.quotes.clone().count(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sequence_gaps_count_the_ticks_skipped() {
        assert_eq!(seq_gap(0, 7), (0, 7), "the first seen starts the count");
        assert_eq!(seq_gap(7, 8), (0, 8));
        assert_eq!(seq_gap(8, 12), (3, 12), "9, 10 and 11 skipped");
        assert_eq!(seq_gap(12, 12), (0, 12), "a repeat");
        assert_eq!(seq_gap(12, 5), (0, 12), "an older one");
    }
}
