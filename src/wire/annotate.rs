//! Annotated hex dumps of frames, one line per field: for debugging tools
//! and for the worked examples in `docs/protocol.md`. Cold path: allocates
//! a `String`.

use std::fmt::Write as _;

use super::codes::{
    DisconnectReason, LogonRejectReason, RejectReason, SubscribeStatus, PRICE_FLAG_NAMES,
    QUOTE_FLAG_NAMES,
};
use super::decode::{decode_header, DecodeError};
use super::field::FieldInfo;
use super::spec::{camel_case, message_spec, BlockSpec};

/// Renders `frame` (one whole, valid frame) as offset, bytes and meaning.
pub fn annotate(frame: &[u8]) -> Result<String, DecodeError> {
    super::decode(frame)?; // proves every length below is in bounds
    let (header, _) = decode_header(frame)?;
    let spec =
        message_spec(header.template_id).ok_or(DecodeError::UnknownTemplate(header.template_id))?;
    let mut d = Dump {
        frame,
        pos: 0,
        out: String::new(),
    };
    let len = frame.len();
    d.line(4, &format!("SOFH messageLength = {len}"));
    d.line(2, "SOFH encodingType = 0xEB50 (SBE 1.0 little-endian)");
    d.line(2, &format!("blockLength = {}", header.block_length));
    d.line(
        2,
        &format!("templateId = {} ({})", header.template_id, spec.name),
    );
    d.line(2, &format!("schemaId = {:#06X}", header.schema_id));
    d.line(2, &format!("version = {}", header.version));
    d.block(&spec.root, "", header.block_length as usize);
    for group in spec.groups {
        let block_length = d.u16_at(0);
        let count = d.u16_at(2);
        d.line(2, &format!("{}: blockLength = {block_length}", group.name));
        d.line(2, &format!("{}: numInGroup = {count}", group.name));
        for i in 0..count {
            d.block(
                &group.entry,
                &format!("{}[{i}].", group.name),
                block_length as usize,
            );
        }
    }
    for name in spec.data {
        let n = d.frame.get(d.pos).copied().unwrap_or(0) as usize;
        d.line(1, &format!("{name}: length = {n}"));
        let text =
            String::from_utf8_lossy(d.frame.get(d.pos..d.pos + n).unwrap_or(&[])).into_owned();
        d.bytes(n, &format!("{name} = {text:?}"));
    }
    if d.pos < frame.len() {
        d.bytes(frame.len() - d.pos, "(not in this schema version; skipped)");
    }
    Ok(d.out)
}

struct Dump<'a> {
    frame: &'a [u8],
    pos: usize,
    out: String,
}

impl Dump<'_> {
    fn u16_at(&self, off: usize) -> u16 {
        let b = |i: usize| self.frame.get(self.pos + off + i).copied().unwrap_or(0);
        u16::from_le_bytes([b(0), b(1)])
    }

    fn line(&mut self, n: usize, label: &str) {
        let bytes = self.frame.get(self.pos..self.pos + n).unwrap_or(&[]);
        let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let line = format!("{:04x}  {:<47}  {label}", self.pos, hex.join(" "));
        let _ = writeln!(self.out, "{}", line.trim_end());
        self.pos += n;
    }

    /// A byte run, 16 bytes per line, the label on the first.
    fn bytes(&mut self, n: usize, label: &str) {
        let mut left = n;
        let mut first = true;
        while left > 0 {
            let take = left.min(16);
            self.line(take, if first { label } else { "" });
            first = false;
            left -= take;
        }
    }

    fn block(&mut self, spec: &BlockSpec, prefix: &str, block_length: usize) {
        let start = self.pos;
        for f in spec.fields {
            let value = field_value(
                f,
                self.frame.get(self.pos..self.pos + f.size).unwrap_or(&[]),
            );
            self.line(f.size, &format!("{prefix}{} = {value}", camel_case(f.name)));
        }
        let extra = (start + block_length).saturating_sub(self.pos);
        if extra > 0 {
            self.bytes(extra, "(newer fields; skipped)");
        }
    }
}

fn field_value(f: &FieldInfo, b: &[u8]) -> String {
    let mut raw = [0u8; 8];
    for (dst, src) in raw.iter_mut().zip(b) {
        *dst = *src;
    }
    let unsigned = u64::from_le_bytes(raw);
    match f.sbe_type {
        "Name16" => format!(
            "{:?}",
            String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[]))
        ),
        "int64" if unsigned as i64 == i64::MIN => "i64::MIN (none)".to_string(),
        "int64" => (unsigned as i64).to_string(),
        "BooleanType" => (unsigned != 0).to_string(),
        "PriceFlags" => flags(unsigned as u8, PRICE_FLAG_NAMES),
        "QuoteFlags" => flags(unsigned as u8, QUOTE_FLAG_NAMES),
        "RejectReason" => RejectReason(unsigned as u16).to_string(),
        "LogonRejectReason" => LogonRejectReason(unsigned as u8).to_string(),
        "DisconnectReason" => DisconnectReason(unsigned as u8).to_string(),
        "SubscribeStatus" => SubscribeStatus(unsigned as u8).to_string(),
        _ => unsigned.to_string(),
    }
}

fn flags(bits: u8, names: &[(u8, &str)]) -> String {
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        format!("{bits:#04x}")
    } else {
        format!("{bits:#04x} ({})", set.join("|"))
    }
}
