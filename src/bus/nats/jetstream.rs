//! The JetStream API calls the bus makes, as requests over [`Client`]:
//! stream info/create, direct get of a subject's last message, and a KV
//! bucket's put with compare-and-set (`Nats-Expected-Last-Subject-Sequence`).
//!
//! Contract: every call waits at most its `timeout`; every refusal comes
//! back as a [`JsError`] with the server's code and description. A KV
//! update or delete allocates nothing (headers from stack buffers, the
//! PubAck read in place); set-up calls and gets allocate their request
//! bodies.

use std::fmt;
use std::time::Duration;

use super::client::Client;
use super::json::{self, Writer};
use super::proto;
use super::session::{Reply, RequestError};

/// JetStream's code for "stream name already in use" (a create race).
const ERR_STREAM_NAME_IN_USE: u64 = 10058;
/// JetStream's code for a failed `Nats-Expected-Last-Subject-Sequence`.
pub(crate) const ERR_WRONG_LAST_SEQUENCE: u64 = 10071;
/// JetStream's code for "stream not found".
const ERR_STREAM_NOT_FOUND: u64 = 10059;
const EXPECTED_LAST_SUBJECT_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";

/// Why a JetStream call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsError {
    /// No reply (no connection, timeout, connection lost).
    Request(RequestError),
    /// The API's `error` object.
    Api {
        code: u64,
        err_code: u64,
        description: String,
    },
    /// A status reply without body (`503`: no JetStream responder).
    Status(u16),
    /// A reply that is not what the API sends.
    Reply(String),
}

impl fmt::Display for JsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsError::Request(e) => write!(f, "{e}"),
            JsError::Api {
                code,
                err_code,
                description,
            } => write!(f, "{description} (code {code}, err_code {err_code})"),
            JsError::Status(503) => write!(f, "no JetStream responder (status 503)"),
            JsError::Status(s) => write!(f, "status {s}"),
            JsError::Reply(why) => write!(f, "unreadable reply: {why}"),
        }
    }
}

impl From<RequestError> for JsError {
    fn from(e: RequestError) -> JsError {
        JsError::Request(e)
    }
}

/// A stream's settings (the subset the bus uses; times in nanoseconds,
/// 0 for the server's default).
#[derive(Debug, Clone)]
pub(crate) struct StreamConfig<'a> {
    pub(crate) name: &'a str,
    pub(crate) subjects: &'a [&'a str],
    pub(crate) max_age_ns: u64,
    pub(crate) replicas: usize,
    /// Refuse new messages when full (KV) instead of dropping old ones.
    pub(crate) discard_new: bool,
    /// The KV bucket flags: rollup headers allowed, deletes denied.
    pub(crate) kv: bool,
    pub(crate) duplicate_window_ns: u64,
}

impl StreamConfig<'_> {
    /// The API's JSON: file storage, limits retention, one message per
    /// subject, direct gets allowed.
    pub(crate) fn to_json(&self) -> String {
        let ns = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Writer::object()
            .str("name", self.name)
            .strs("subjects", self.subjects)
            .str("retention", "limits")
            .int("max_consumers", -1)
            .int("max_msgs", -1)
            .int("max_bytes", -1)
            .int("max_age", ns(self.max_age_ns))
            .int("max_msgs_per_subject", 1)
            .int("max_msg_size", -1)
            .str("discard", if self.discard_new { "new" } else { "old" })
            .str("storage", "file")
            .int("num_replicas", self.replicas as i64)
            .int("duplicate_window", ns(self.duplicate_window_ns))
            .bool("allow_direct", true)
            .bool("allow_rollup_hdrs", self.kv)
            .bool("deny_delete", self.kv)
            .end()
    }
}

/// The reply's `error` object as a [`JsError`], if it has one.
fn api_error(reply: &Reply) -> Result<json::Value<'_>, JsError> {
    if reply.payload.is_empty() {
        return Err(JsError::Status(reply.status().unwrap_or(0)));
    }
    let v = json::parse(&reply.payload).map_err(|e| JsError::Reply(e.to_string()))?;
    match v.get("error") {
        None => Ok(v),
        Some(e) => {
            let num = |k| e.get(k).and_then(|n| n.as_u64()).unwrap_or(0);
            Err(JsError::Api {
                code: num("code"),
                err_code: num("err_code"),
                description: e
                    .get("description")
                    .and_then(|d| d.as_str())
                    .map(|d| d.into_owned())
                    .unwrap_or_default(),
            })
        }
    }
}

/// Makes sure the stream exists: its info if it does, else created with
/// `cfg` (an existing stream keeps its own settings).
pub(crate) fn ensure_stream(
    c: &mut Client,
    cfg: &StreamConfig<'_>,
    timeout: Duration,
) -> Result<(), JsError> {
    let info = format!("$JS.API.STREAM.INFO.{}", cfg.name);
    match api_error(c.request(&info, &[], b"", timeout)?) {
        Ok(_) => return Ok(()),
        Err(JsError::Api { code: 404, .. }) => {}
        Err(e) => return Err(e),
    }
    let create = format!("$JS.API.STREAM.CREATE.{}", cfg.name);
    match api_error(c.request(&create, &[], cfg.to_json().as_bytes(), timeout)?) {
        Ok(_) => Ok(()),
        Err(JsError::Api {
            err_code: ERR_STREAM_NAME_IN_USE,
            ..
        }) => api_error(c.request(&info, &[], b"", timeout)?).map(|_| ()),
        Err(e) => Err(e),
    }
}

/// The last message on `subject` in `stream` (a direct get, answered by
/// any replica): `Ok(None)` if the subject has none.
pub(crate) fn last_for_subject<'c>(
    c: &'c mut Client,
    stream: &str,
    subject: &str,
    timeout: Duration,
) -> Result<Option<&'c Reply>, JsError> {
    let (api, body) = last_for_subject_request(stream, subject);
    let reply = c.request(&api, &[], body.as_bytes(), timeout)?;
    direct_get_result(reply)
}

/// Whether a stream exists, by its info: `Ok(true)` found, `Ok(false)`
/// not found, `Err` no answer or another refusal.
pub(crate) fn stream_exists(reply: &Reply) -> Result<bool, JsError> {
    match api_error(reply) {
        Ok(_) => Ok(true),
        Err(JsError::Api { code: 404, .. })
        | Err(JsError::Api {
            err_code: ERR_STREAM_NOT_FOUND,
            ..
        }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The subject and body of a stream-info request for `stream`.
pub(crate) fn stream_info_subject(stream: &str) -> String {
    format!("$JS.API.STREAM.INFO.{stream}")
}

/// The subject and body of a direct get of `subject`'s last message in
/// `stream`.
pub(crate) fn last_for_subject_request(stream: &str, subject: &str) -> (String, String) {
    let api = format!("$JS.API.DIRECT.GET.{stream}");
    let body = Writer::object().str("last_by_subj", subject).end();
    (api, body)
}

/// A direct get's answer: `Ok(Some)` the message, `Ok(None)` none on the
/// subject, `Err(Status(503))` no stream answering.
pub(crate) fn direct_get_result(reply: &Reply) -> Result<Option<&Reply>, JsError> {
    match reply.status() {
        None | Some(200) => Ok(Some(reply)),
        Some(404) => Ok(None),
        Some(s) => Err(JsError::Status(s)),
    }
}

/// The stream sequence of a direct-get reply (`Nats-Sequence`).
pub(crate) fn sequence(reply: &Reply) -> Option<u64> {
    reply.header("Nats-Sequence").and_then(proto::parse_u64)
}

/// Why a KV write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KvError {
    /// The key's revision is not the expected one (another writer).
    WrongLastRevision,
    /// No stream answers on the key's subject (status 503): the bucket is
    /// gone, or JetStream is not up.
    NoStore,
    Failed(JsError),
}

/// A KV write's answer: the new revision, or why not.
pub(crate) fn put_result(reply: &Reply) -> Result<u64, KvError> {
    match api_error(reply) {
        Ok(ack) => ack
            .get("seq")
            .and_then(|s| s.as_u64())
            .ok_or_else(|| KvError::Failed(JsError::Reply("PubAck without seq".into()))),
        Err(JsError::Api {
            err_code: ERR_WRONG_LAST_SEQUENCE,
            ..
        }) => Err(KvError::WrongLastRevision),
        Err(JsError::Status(503)) => Err(KvError::NoStore),
        Err(e) => Err(KvError::Failed(e)),
    }
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::WrongLastRevision => write!(f, "wrong last revision"),
            KvError::NoStore => write!(f, "no stream on the key (status 503)"),
            KvError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// One key of a KV bucket (stream `KV_<bucket>`, subject `$KV.<bucket>.<key>`).
#[derive(Debug, Clone)]
pub(crate) struct KvKey {
    pub(crate) stream: String,
    pub(crate) subject: String,
}

impl KvKey {
    pub(crate) fn new(bucket: &str, key: &str) -> KvKey {
        KvKey {
            stream: format!("KV_{bucket}"),
            subject: format!("$KV.{bucket}.{key}"),
        }
    }

    /// Writes `value` if the key's revision is `expected` (0: absent);
    /// `delete` writes a delete marker instead. Returns the new revision.
    fn put(
        &self,
        c: &mut Client,
        expected: u64,
        delete: bool,
        value: &[u8],
        timeout: Duration,
    ) -> Result<u64, KvError> {
        let mut digits = [0u8; 20];
        let expected = proto::u64_digits(expected, &mut digits);
        let del: &[(&str, &[u8])] = &[
            (EXPECTED_LAST_SUBJECT_SEQ, expected),
            ("KV-Operation", b"DEL"),
        ];
        let headers = if delete { del } else { &del[..1] };
        let reply = c
            .request(&self.subject, headers, value, timeout)
            .map_err(|e| KvError::Failed(e.into()))?;
        put_result(reply)
    }

    /// Sends a write of `value` if the key's revision is `expected` (0:
    /// absent; with `delete` a delete marker instead) without waiting: its
    /// answer is [`put_result`] of [`Client::reply_ready`]. False if there
    /// is no server. Allocates nothing (headers from stack buffers).
    pub(crate) fn start_put(
        &self,
        c: &mut Client,
        expected: u64,
        delete: bool,
        value: &[u8],
    ) -> bool {
        let mut digits = [0u8; 20];
        let expected = proto::u64_digits(expected, &mut digits);
        let del: &[(&str, &[u8])] = &[
            (EXPECTED_LAST_SUBJECT_SEQ, expected),
            ("KV-Operation", b"DEL"),
        ];
        let headers = if delete { del } else { &del[..1] };
        c.start_request(&self.subject, headers, value)
    }

    /// Deletes the key if it is still at `revision`.
    pub(crate) fn delete(
        &self,
        c: &mut Client,
        revision: u64,
        timeout: Duration,
    ) -> Result<u64, KvError> {
        self.put(c, revision, true, b"", timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(headers: &[u8], payload: &[u8]) -> Reply {
        let mut r = Reply::default();
        r.headers.extend_from_slice(headers);
        r.payload.extend_from_slice(payload);
        r
    }

    #[test]
    fn the_stream_config_is_the_last_value_and_kv_shape() {
        let kv = StreamConfig {
            name: "KV_PW_LEASE",
            subjects: &["$KV.PW_LEASE.>"],
            max_age_ns: 3_000_000_000,
            replicas: 3,
            discard_new: true,
            kv: true,
            duplicate_window_ns: 3_000_000_000,
        };
        let text = kv.to_json();
        let v = json::parse(text.as_bytes()).unwrap();
        let num = |k| v.get(k).and_then(|n| n.as_u64());
        let text_of = |k| v.get(k).and_then(|s| s.as_str()).map(|s| s.into_owned());
        assert_eq!(num("max_msgs_per_subject"), Some(1));
        assert_eq!(num("num_replicas"), Some(3));
        assert_eq!(num("max_age"), Some(3_000_000_000));
        assert_eq!(text_of("discard").as_deref(), Some("new"));
        assert_eq!(text_of("storage").as_deref(), Some("file"));
        for flag in ["allow_direct", "allow_rollup_hdrs", "deny_delete"] {
            assert_eq!(v.get(flag).map(|b| b.raw_is(b"true")), Some(true), "{flag}");
        }
        let prices = StreamConfig {
            kv: false,
            discard_new: false,
            ..kv
        };
        let v2 = prices.to_json();
        assert!(v2.contains(r#""discard":"old""#) && v2.contains(r#""deny_delete":false"#));
    }

    #[test]
    fn api_errors_statuses_and_bad_replies_are_told_apart() {
        let wrong =
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}"#;
        assert_eq!(
            api_error(&reply(b"", wrong)).unwrap_err(),
            JsError::Api {
                code: 400,
                err_code: ERR_WRONG_LAST_SEQUENCE,
                description: "wrong last sequence: 5".into()
            }
        );
        let ack = br#"{"stream":"KV_X","seq":7}"#;
        let acked = reply(b"", ack);
        let v = api_error(&acked).unwrap();
        assert_eq!(v.get("seq").and_then(|s| s.as_u64()), Some(7));
        let none = reply(b"NATS/1.0 503\r\n\r\n", b"");
        assert_eq!(api_error(&none).unwrap_err(), JsError::Status(503));
        assert!(JsError::Status(503)
            .to_string()
            .contains("no JetStream responder"));
        assert!(matches!(
            api_error(&reply(b"", b"{")),
            Err(JsError::Reply(_))
        ));
        let found = reply(
            b"NATS/1.0\r\nNats-Sequence: 12\r\nKV-Operation: DEL\r\n\r\n",
            b"",
        );
        assert_eq!(sequence(&found), Some(12));
        assert_eq!(found.status(), None);
    }
}
