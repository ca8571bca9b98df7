//! What one client remembers across connections, without I/O: the output
//! buffer, the subscriptions to restore, the request in flight and its
//! reply, and messages kept while a request waits.

use std::fmt;

use super::auth::Material;
use super::json;
use super::proto::{self, Op};

/// What a server's INFO asks of and offers to this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// Largest message it takes.
    pub(crate) max_payload: usize,
    /// The nonce an NKey or JWT user signs.
    pub(crate) nonce: Option<String>,
    /// Only TLS connections are accepted.
    pub(crate) tls_required: bool,
    /// TLS is offered though not required.
    pub(crate) tls_available: bool,
    /// Every connection must authenticate.
    pub(crate) auth_required: bool,
}

impl Default for ServerInfo {
    fn default() -> ServerInfo {
        ServerInfo {
            max_payload: super::MAX_PAYLOAD_DEFAULT,
            nonce: None,
            tls_required: false,
            tls_available: false,
            auth_required: false,
        }
    }
}

/// The sid of the inbox subscription (`_INBOX.<random>.*`), which carries
/// every reply.
pub(crate) const INBOX_SID: u64 = 1;
/// Output buffer capacity reserved at start.
const OUT_BYTES: usize = 64 * 1024;
/// Reply buffers reserved at start (a reply larger grows them once).
const REPLY_BYTES: usize = 4 * 1024;
/// Most bytes of messages kept while a request waits; beyond, messages are
/// dropped (an edge then sees a sequence gap and flags it).
pub(crate) const PENDING_MAX_BYTES: usize = 8 << 20;

/// Why a request got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestError {
    NotConnected,
    Timeout,
    Lost,
    /// The server's permissions refused the request's subject.
    Denied,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestError::NotConnected => "no server connection",
            RequestError::Timeout => "no reply in time",
            RequestError::Lost => "connection lost while waiting",
            RequestError::Denied => "refused by the server's permissions for these credentials",
        })
    }
}

/// The reply to the last request: its header block (empty without
/// headers) and payload.
#[derive(Debug, Default)]
pub(crate) struct Reply {
    pub(crate) headers: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) done: bool,
    /// The server refused to take the request (its permissions).
    pub(crate) denied: bool,
    id: u64,
}

impl Reply {
    /// The status on the header line (`NATS/1.0 404`), if any.
    pub(crate) fn status(&self) -> Option<u16> {
        proto::header_status(&self.headers)
    }

    /// A header's value.
    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        proto::header(&self.headers, name)
    }
}

/// Messages kept while a request waits, in one reused byte arena:
/// `[subject len u32][payload len u32][subject][payload]`.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    buf: Vec<u8>,
    /// Messages dropped because the arena was full.
    pub(crate) dropped: u64,
}

impl Pending {
    fn push(&mut self, subject: &[u8], payload: &[u8]) {
        let need = 8 + subject.len() + payload.len();
        if self.buf.len() + need > PENDING_MAX_BYTES {
            self.dropped += 1;
            return;
        }
        self.buf
            .extend_from_slice(&(subject.len() as u32).to_le_bytes());
        self.buf
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(subject);
        self.buf.extend_from_slice(payload);
    }

    fn len_at(&self, at: usize) -> Option<usize> {
        let b: [u8; 4] = self.buf.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    }

    /// Hands every kept message to `f`, in arrival order, and empties.
    pub(crate) fn drain(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) {
        let mut at = 0;
        while let (Some(s), Some(p)) = (self.len_at(at), self.len_at(at + 4)) {
            let body = at + 8;
            let (Some(subject), Some(payload)) = (
                self.buf.get(body..body + s),
                self.buf.get(body + s..body + s + p),
            ) else {
                break;
            };
            f(subject, payload);
            at = body + s + p;
        }
        self.buf.clear();
    }
}

/// See the module doc.
#[derive(Debug)]
pub(crate) struct Session {
    /// Bytes queued for the server.
    pub(crate) out: Vec<u8>,
    inbox: String,
    subs: Vec<(u64, String)>,
    next_sid: u64,
    req_id: u64,
    reply_to: Vec<u8>,
    /// The subject of the request in flight.
    req_subject: String,
    pub(crate) reply: Reply,
    pub(crate) pending: Pending,
    /// A request waits: other messages go to [`Session::pending`].
    pub(crate) buffering: bool,
}

impl Session {
    /// A session whose replies come to `inbox` (`_INBOX.<random>.`).
    pub(crate) fn new(inbox: &str) -> Session {
        Session {
            out: Vec::with_capacity(OUT_BYTES),
            inbox: inbox.to_string(),
            subs: Vec::new(),
            next_sid: INBOX_SID + 1,
            req_id: 0,
            reply_to: Vec::with_capacity(inbox.len() + 20),
            req_subject: String::with_capacity(128),
            reply: Reply {
                headers: Vec::with_capacity(REPLY_BYTES),
                payload: Vec::with_capacity(REPLY_BYTES),
                done: false,
                denied: false,
                id: 0,
            },
            pending: Pending::default(),
            buffering: false,
        }
    }

    /// Reads INFO: learns the cluster's `connect_urls` (added after the
    /// configured servers, at most `max` in all) and what the server asks
    /// of this connection.
    pub(crate) fn info(
        &mut self,
        json: &[u8],
        servers: &mut Vec<String>,
        max: usize,
    ) -> ServerInfo {
        let Ok(v) = json::parse(json) else {
            tracing::warn!("INFO from the server is not JSON; ignored");
            return ServerInfo::default();
        };
        if let Some(urls) = v.get("connect_urls") {
            for url in urls.items().filter_map(|u| u.as_str()) {
                if servers.len() < max && !servers.iter().any(|s| *s == url) {
                    servers.push(url.into_owned());
                }
            }
        }
        let flag = |key| v.get(key).is_some_and(|b| b.raw_is(b"true"));
        ServerInfo {
            max_payload: v
                .get("max_payload")
                .and_then(|m| m.as_u64())
                .and_then(|m| usize::try_from(m).ok())
                .unwrap_or(super::MAX_PAYLOAD_DEFAULT),
            nonce: v
                .get("nonce")
                .and_then(|n| n.as_str())
                .map(|n| n.into_owned()),
            tls_required: flag("tls_required"),
            tls_available: flag("tls_available"),
            auth_required: flag("auth_required"),
        }
    }

    /// CONNECT (headers and no-responders on, no +OK acks, `creds` signing
    /// the INFO's `nonce`) and a PING whose PONG confirms the server took
    /// it.
    pub(crate) fn hello(
        &mut self,
        creds: &Material,
        nonce: Option<&str>,
        tls: bool,
    ) -> Result<(), crate::bus::security::AccessError> {
        let connect = json::Writer::object()
            .bool("verbose", false)
            .bool("pedantic", false)
            .bool("headers", true)
            .bool("no_responders", true)
            .bool("tls_required", tls)
            .str("name", "pricewire")
            .str("lang", "rust")
            .str("version", env!("CARGO_PKG_VERSION"))
            .int("protocol", 1);
        let mut connect = creds.connect_fields(connect, nonce)?.end();
        proto::connect(&mut self.out, &connect);
        // The copy may hold a password or token.
        zeroize::Zeroize::zeroize(&mut connect);
        proto::ping(&mut self.out);
        Ok(())
    }

    /// SUB for the inbox and every subscription (a new connection).
    pub(crate) fn resubscribe(&mut self) {
        let inbox = format!("{}*", self.inbox);
        proto::subscribe(&mut self.out, &inbox, INBOX_SID);
        for (sid, subject) in &self.subs {
            proto::subscribe(&mut self.out, subject, *sid);
        }
    }

    /// A new subscription, kept for reconnects.
    pub(crate) fn subscribe(&mut self, subject: &str) {
        let sid = self.next_sid;
        self.next_sid += 1;
        self.subs.push((sid, subject.to_string()));
        proto::subscribe(&mut self.out, subject, sid);
    }

    /// Queues a request with a fresh reply subject; later replies to
    /// earlier requests are ignored.
    pub(crate) fn start_request(
        &mut self,
        subject: &str,
        headers: &[(&str, &[u8])],
        payload: &[u8],
    ) {
        self.req_id += 1;
        self.reply.id = self.req_id;
        self.reply.done = false;
        self.reply.denied = false;
        self.req_subject.clear();
        self.req_subject.push_str(subject);
        self.reply_to.clear();
        self.reply_to.extend_from_slice(self.inbox.as_bytes());
        proto::put_u64(&mut self.reply_to, self.req_id);
        if headers.is_empty() {
            proto::publish(&mut self.out, subject, Some(&self.reply_to), payload);
        } else {
            proto::hpublish(
                &mut self.out,
                subject,
                Some(&self.reply_to),
                headers,
                payload,
            );
        }
        self.buffering = true;
    }

    /// One op from the server (PONG bookkeeping is the caller's).
    pub(crate) fn handle(
        &mut self,
        op: Op<'_>,
        servers: &mut Vec<String>,
        on_msg: &mut dyn FnMut(&[u8], &[u8]),
    ) {
        match op {
            Op::Ping => proto::pong(&mut self.out),
            Op::Info(json) => {
                self.info(json, servers, crate::bus::SERVERS_MAX);
            }
            // Counted and logged by the client; a refusal of the request
            // in flight ends its wait now rather than at its timeout.
            Op::Err(reason) => {
                if self.buffering && !self.reply.done && denies(reason, &self.req_subject) {
                    self.reply.denied = true;
                }
            }
            Op::Msg(m) if m.sid == INBOX_SID => {
                let id = m
                    .subject
                    .strip_prefix(self.inbox.as_bytes())
                    .and_then(proto::parse_u64);
                if id == Some(self.reply.id) && !self.reply.done {
                    self.reply.headers.clear();
                    self.reply.headers.extend_from_slice(m.headers);
                    self.reply.payload.clear();
                    self.reply.payload.extend_from_slice(m.payload);
                    self.reply.done = true;
                }
            }
            Op::Msg(m) if self.buffering => self.pending.push(m.subject, m.payload),
            Op::Msg(m) => on_msg(m.subject, m.payload),
            Op::Pong | Op::Ok => {}
        }
    }
}

/// `-ERR 'Permissions Violation for Publish to "<subject>"'` names
/// `subject`.
fn denies(reason: &[u8], subject: &str) -> bool {
    let prefix = b"'Permissions Violation for Publish to \"";
    reason
        .strip_prefix(&prefix[..])
        .and_then(|r| r.strip_suffix(b"\"'"))
        .is_some_and(|s| s == subject.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_match_the_request_in_flight_and_others_wait_in_pending() {
        let mut s = Session::new("_INBOX.X.");
        let mut servers = vec!["a:1".to_string()];
        s.start_request("$JS.API.INFO", &[], b"");
        assert!(String::from_utf8_lossy(&s.out).contains("PUB $JS.API.INFO _INBOX.X.1 0"));
        let mut seen = Vec::new();
        let mut on = |subj: &[u8], p: &[u8]| seen.push((subj.to_vec(), p.to_vec()));
        let msg = |subject: &'static [u8], sid, payload: &'static [u8]| {
            Op::Msg(proto::Msg {
                subject,
                sid,
                reply: None,
                headers: b"",
                payload,
            })
        };
        s.handle(msg(b"p.price.A", 2, b"live"), &mut servers, &mut on);
        s.handle(
            msg(b"_INBOX.X.0", INBOX_SID, b"stale"),
            &mut servers,
            &mut on,
        );
        assert!(!s.reply.done);
        s.handle(msg(b"_INBOX.X.1", INBOX_SID, b"{}"), &mut servers, &mut on);
        assert!(s.reply.done);
        assert_eq!(s.reply.payload, b"{}");
        s.buffering = false;
        s.handle(msg(b"p.price.B", 2, b"now"), &mut servers, &mut on);
        s.pending.drain(&mut on);
        let subjects: Vec<&[u8]> = seen.iter().map(|(s, _)| s.as_slice()).collect();
        assert_eq!(subjects, [&b"p.price.B"[..], b"p.price.A"]);
    }

    #[test]
    fn a_permission_refusal_ends_the_wait_of_its_request_only() {
        let mut s = Session::new("_INBOX.X.");
        let mut servers = Vec::new();
        s.start_request("$JS.API.STREAM.CREATE.P", &[], b"{}");
        let other = br#"'Permissions Violation for Publish to "p.price.X"'"#;
        s.handle(Op::Err(other), &mut servers, &mut |_, _| {});
        assert!(!s.reply.denied);
        let this = br#"'Permissions Violation for Publish to "$JS.API.STREAM.CREATE.P"'"#;
        s.handle(Op::Err(this), &mut servers, &mut |_, _| {});
        assert!(s.reply.denied);
        s.start_request("$JS.API.STREAM.INFO.P", &[], b"");
        assert!(!s.reply.denied, "a new request starts clean");
    }

    #[test]
    fn info_teaches_cluster_urls_bounded_and_max_payload() {
        let mut s = Session::new("_INBOX.X.");
        let mut servers = vec!["127.0.0.1:4222".to_string()];
        let info =
            br#"{"max_payload":2048,"connect_urls":["127.0.0.1:4222","127.0.0.1:4223","h:1"]}"#;
        assert_eq!(s.info(info, &mut servers, 2).max_payload, 2048);
        assert_eq!(servers, ["127.0.0.1:4222", "127.0.0.1:4223"]);
        assert_eq!(s.info(b"not json", &mut servers, 2).max_payload, 1 << 20);
        let secured = br#"{"nonce":"n0nce","tls_required":true,"auth_required":true}"#;
        let facts = s.info(secured, &mut servers, 2);
        assert_eq!(facts.nonce.as_deref(), Some("n0nce"));
        assert!(facts.tls_required && facts.auth_required && !facts.tls_available);
    }

    #[test]
    fn hello_and_resubscribe_write_connect_and_every_sub() {
        let mut s = Session::new("_INBOX.X.");
        s.subscribe("p.price.>");
        s.out.clear();
        s.hello(&Material::None, None, false).unwrap();
        s.resubscribe();
        let text = String::from_utf8(s.out.clone()).unwrap();
        assert!(text.starts_with(
            "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true"
        ));
        assert!(
            text.ends_with("PING\r\nSUB _INBOX.X.* 1\r\nSUB p.price.> 2\r\n"),
            "{text}"
        );
    }
}
