//! The little JSON the JetStream API needs, without serde_json.
//!
//! Reading: [`parse`] validates a whole document strictly (RFC 8259: no
//! trailing commas, no comments, no leading zeros, UTF-8, nesting at most
//! [`DEPTH_MAX`]) and hands back a [`Value`] that borrows the text; named
//! fields are then found by walking the text again, so reading a reply
//! allocates nothing unless a string with escapes is asked for. It never
//! panics on any input. Writing: [`Writer`] builds the few flat request
//! bodies (stream configuration, CONNECT) with strings escaped.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Deepest nesting of arrays and objects accepted.
pub(crate) const DEPTH_MAX: usize = 32;

/// Why a document is not strict JSON: the byte offset and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonError {
    pub(crate) at: usize,
    pub(crate) reason: &'static str,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JSON at byte {}: {}", self.at, self.reason)
    }
}

/// What a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// One validated value: its kind and its text (strings with their quotes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Value<'a> {
    pub(crate) kind: Kind,
    raw: &'a [u8],
}

struct Scan<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn err<T>(&self, reason: &'static str) -> Result<T, JsonError> {
        Err(JsonError { at: self.i, reason })
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.i += usize::from(hit);
        hit
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, JsonError> {
        if self.s.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(kind)
        } else {
            self.err("unknown literal")
        }
    }

    /// Skips one value, checking it; returns its kind.
    fn value(&mut self, depth: usize) -> Result<Kind, JsonError> {
        if depth > DEPTH_MAX {
            return self.err("nested too deep");
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(|_| Kind::String),
            Some(b't') => self.literal(b"true", Kind::Bool),
            Some(b'f') => self.literal(b"false", Kind::Bool),
            Some(b'n') => self.literal(b"null", Kind::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.err("not a value"),
            None => self.err("unexpected end"),
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - from
    }

    fn number(&mut self) -> Result<Kind, JsonError> {
        self.eat(b'-');
        if self.eat(b'0') {
            if matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.err("leading zero");
            }
        } else if self.digits() == 0 {
            return self.err("number without digits");
        }
        if self.eat(b'.') && self.digits() == 0 {
            return self.err("no digits after the point");
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            if self.digits() == 0 {
                return self.err("no digits in the exponent");
            }
        }
        Ok(Kind::Number)
    }

    /// Skips a string; true if it holds an escape.
    fn string(&mut self) -> Result<bool, JsonError> {
        self.i += 1;
        let mut escaped = false;
        loop {
            match self.peek() {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.s.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return self.err("bad \\u escape");
                            }
                            self.i += 5;
                        }
                        _ => return self.err("bad escape"),
                    }
                }
                Some(0..=0x1f) => return self.err("control character in a string"),
                Some(_) => self.i += 1,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Kind, JsonError> {
        self.i += 1;
        self.ws();
        if self.eat(b']') {
            return Ok(Kind::Array);
        }
        loop {
            self.ws();
            self.value(depth + 1)?;
            self.ws();
            if self.eat(b']') {
                return Ok(Kind::Array);
            }
            if !self.eat(b',') {
                return self.err("expected , or ]");
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Kind, JsonError> {
        self.i += 1;
        self.ws();
        if self.eat(b'}') {
            return Ok(Kind::Object);
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.err("expected a key");
            }
            self.string()?;
            self.ws();
            if !self.eat(b':') {
                return self.err("expected :");
            }
            self.ws();
            self.value(depth + 1)?;
            self.ws();
            if self.eat(b'}') {
                return Ok(Kind::Object);
            }
            if !self.eat(b',') {
                return self.err("expected , or }");
            }
        }
    }

    /// The next value of an already validated container (after `[`, `,`,
    /// `{` or `:`), or `None` at its end.
    fn next_value(&mut self) -> Option<Value<'a>> {
        self.ws();
        if matches!(self.peek(), Some(b']' | b'}') | None) {
            return None;
        }
        let from = self.i;
        let kind = self.value(0).ok()?;
        let v = Value {
            kind,
            raw: &self.s[from..self.i],
        };
        self.ws();
        self.eat(b',');
        Some(v)
    }
}

/// Validates `doc` as one JSON value (whitespace around allowed).
pub(crate) fn parse(doc: &[u8]) -> Result<Value<'_>, JsonError> {
    if let Err(e) = std::str::from_utf8(doc) {
        return Err(JsonError {
            at: e.valid_up_to(),
            reason: "not UTF-8",
        });
    }
    let mut s = Scan { s: doc, i: 0 };
    s.ws();
    let from = s.i;
    let kind = s.value(0)?;
    let raw = &doc[from..s.i];
    s.ws();
    if s.i != doc.len() {
        return s.err("text after the value");
    }
    Ok(Value { kind, raw })
}

impl<'a> Value<'a> {
    fn inner(&self) -> Scan<'a> {
        Scan { s: self.raw, i: 1 }
    }

    /// The member `key` of an object (the first if repeated).
    pub(crate) fn get(&self, key: &str) -> Option<Value<'a>> {
        if self.kind != Kind::Object {
            return None;
        }
        let mut s = self.inner();
        loop {
            let k = s.next_value()?;
            s.ws();
            s.eat(b':');
            let v = s.next_value()?;
            if k.str_eq(key) {
                return Some(v);
            }
        }
    }

    /// The elements of an array (none for any other kind).
    pub(crate) fn items(&self) -> impl Iterator<Item = Value<'a>> {
        let mut s = self.inner();
        let array = self.kind == Kind::Array;
        std::iter::from_fn(move || if array { s.next_value() } else { None })
    }

    /// An unsigned integer (no fraction, no exponent, fits in u64).
    pub(crate) fn as_u64(&self) -> Option<u64> {
        (self.kind == Kind::Number)
            .then(|| std::str::from_utf8(self.raw).ok()?.parse().ok())
            .flatten()
    }

    /// A string's text, unescaped (borrowed when it holds no escape).
    pub(crate) fn as_str(&self) -> Option<Cow<'a, str>> {
        if self.kind != Kind::String {
            return None;
        }
        let body = self.raw.get(1..self.raw.len().saturating_sub(1))?;
        let text = std::str::from_utf8(body).ok()?;
        if !body.contains(&b'\\') {
            return Some(Cow::Borrowed(text));
        }
        Some(Cow::Owned(unescape(text)))
    }

    /// True if the value's text is exactly `text` (a literal, a number).
    pub(crate) fn raw_is(&self, text: &[u8]) -> bool {
        self.raw == text
    }

    fn str_eq(&self, want: &str) -> bool {
        self.as_str().is_some_and(|s| s == want)
    }
}

fn hex4(chars: &mut std::str::Chars<'_>) -> u32 {
    chars
        .by_ref()
        .take(4)
        .fold(0, |n, c| n * 16 + c.to_digit(16).unwrap_or(0))
}

/// Unescapes a validated string body; lone surrogates become U+FFFD.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let unit = match chars.next() {
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => {
                let hi = hex4(&mut chars);
                let code = if (0xD800..0xDC00).contains(&hi) && chars.as_str().starts_with("\\u") {
                    let mut ahead = chars.clone();
                    ahead.nth(1);
                    let lo = hex4(&mut ahead);
                    if (0xDC00..0xE000).contains(&lo) {
                        chars = ahead;
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else {
                        hi
                    }
                } else {
                    hi
                };
                char::from_u32(code).unwrap_or('\u{FFFD}')
            }
            Some(other) => other,
            None => break,
        };
        out.push(unit);
    }
    out
}

/// Builds one flat JSON object (string, number, boolean and string-array
/// members; an object member from another writer).
#[derive(Debug)]
pub(crate) struct Writer {
    out: String,
}

impl Writer {
    /// `{`.
    pub(crate) fn object() -> Writer {
        Writer {
            out: String::from("{"),
        }
    }

    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        push_str(&mut self.out, key);
        self.out.push(':');
    }

    pub(crate) fn str(mut self, key: &str, value: &str) -> Writer {
        self.key(key);
        push_str(&mut self.out, value);
        self
    }

    pub(crate) fn int(mut self, key: &str, value: i64) -> Writer {
        self.key(key);
        let _ = write!(self.out, "{value}");
        self
    }

    pub(crate) fn bool(mut self, key: &str, value: bool) -> Writer {
        self.key(key);
        self.out.push_str(if value { "true" } else { "false" });
        self
    }

    pub(crate) fn strs(mut self, key: &str, values: &[&str]) -> Writer {
        self.key(key);
        self.out.push('[');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            push_str(&mut self.out, v);
        }
        self.out.push(']');
        self
    }

    /// `}`: the document.
    pub(crate) fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// Appends `s` as a JSON string literal.
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
