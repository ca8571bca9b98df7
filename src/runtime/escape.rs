//! Text from outside, made safe for a log line: [`esc`] wraps anything
//! `Display` (a `&str`, an error), [`esc_bytes`] raw bytes, in a
//! `Display` adapter that writes the value quoted, escaped and bounded.
//!
//! The rule, whatever the input: the output is one line of printable
//! ASCII in double quotes. `"` and `\` are written `\"` and `\\`; tab,
//! newline and carriage return `\t`, `\n`, `\r`; every other character
//! outside `' '..='~'` (C0 and C1 controls, ESC, DEL, non-ASCII, bidi
//! overrides) as `\u{..}` (bytes that are not UTF-8: `\x..`). At most
//! [`SHOWN_MAX`] input characters are shown; the rest is replaced by
//! `...(+N)`, N the characters left out. So a name, symbol or reason
//! holding ANSI sequences or line breaks can neither colour a terminal nor
//! forge a second log line, and a long one cannot flood the log.
//!
//! Used at every log site that prints a string a peer, a client, Redis, a
//! provider or a PROXY header chose (docs/security.md, "Log lines").
//! Writes straight into the formatter: nothing is allocated.

use std::fmt::{self, Display, Write};

/// Most input characters shown.
pub const SHOWN_MAX: usize = 128;

/// `value` for a log line (see the module docs).
pub fn esc<T: Display>(value: T) -> Escaped<T> {
    Escaped(value)
}

/// Raw `bytes` for a log line (UTF-8 shown as text, other bytes `\x..`).
pub fn esc_bytes(bytes: &[u8]) -> EscapedBytes<'_> {
    EscapedBytes(bytes)
}

/// A `Display` value written escaped ([`esc`]).
#[derive(Debug, Clone, Copy)]
pub struct Escaped<T>(T);

/// Bytes written escaped ([`esc_bytes`]).
#[derive(Debug, Clone, Copy)]
pub struct EscapedBytes<'a>(&'a [u8]);

/// Escapes characters into `out`, counting what it leaves out.
struct Escaper<'a, 'b> {
    out: &'a mut fmt::Formatter<'b>,
    shown: usize,
    left_out: usize,
}

impl Escaper<'_, '_> {
    fn char(&mut self, c: char) -> fmt::Result {
        if self.shown >= SHOWN_MAX {
            self.left_out += 1;
            return Ok(());
        }
        self.shown += 1;
        match c {
            '"' => self.out.write_str("\\\""),
            '\\' => self.out.write_str("\\\\"),
            '\t' => self.out.write_str("\\t"),
            '\n' => self.out.write_str("\\n"),
            '\r' => self.out.write_str("\\r"),
            ' '..='~' => self.out.write_char(c),
            _ => write!(self.out, "\\u{{{:x}}}", c as u32),
        }
    }

    fn byte(&mut self, b: u8) -> fmt::Result {
        if self.shown >= SHOWN_MAX {
            self.left_out += 1;
            return Ok(());
        }
        self.shown += 1;
        write!(self.out, "\\x{b:02x}")
    }

    fn finish(self) -> fmt::Result {
        if self.left_out > 0 {
            write!(self.out, "...(+{})", self.left_out)?;
        }
        self.out.write_char('"')
    }
}

impl Write for Escaper<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.chars().try_for_each(|c| self.char(c))
    }
}

fn escaper<'a, 'b>(f: &'a mut fmt::Formatter<'b>) -> Result<Escaper<'a, 'b>, fmt::Error> {
    f.write_char('"')?;
    Ok(Escaper {
        out: f,
        shown: 0,
        left_out: 0,
    })
}

impl<T: Display> Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut e = escaper(f)?;
        write!(e, "{}", self.0)?;
        e.finish()
    }
}

impl Display for EscapedBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut e = escaper(f)?;
        for chunk in self.0.utf8_chunks() {
            chunk.valid().chars().try_for_each(|c| e.char(c))?;
            chunk.invalid().iter().try_for_each(|&b| e.byte(b))?;
        }
        e.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quotes_escapes_and_bounds() {
        assert_eq!(esc("alice").to_string(), "\"alice\"");
        assert_eq!(esc("a\"b\\c\td\ne\rf").to_string(), r#""a\"b\\c\td\ne\rf""#);
        assert_eq!(esc("\u{1b}[31mred").to_string(), r#""\u{1b}[31mred""#);
        assert_eq!(
            esc("é\u{202e}\u{7f}\u{85}").to_string(),
            r#""\u{e9}\u{202e}\u{7f}\u{85}""#
        );
        assert_eq!(esc_bytes(b"ok\xff\n").to_string(), r#""ok\xff\n""#);
        let long = "x".repeat(SHOWN_MAX + 5);
        assert_eq!(
            esc(&long).to_string(),
            format!("\"{}...(+5)\"", "x".repeat(SHOWN_MAX))
        );
        assert_eq!(esc(format_args!("{}-{}", 1, "\n")).to_string(), r#""1-\n""#);
    }

    proptest! {
        /// Any input comes out as one quoted line of printable ASCII, no
        /// longer than the bound allows, and printable ASCII without
        /// quotes or backslashes comes out unchanged.
        #[test]
        fn any_bytes_make_one_printable_line(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            for out in [esc_bytes(&bytes).to_string(), esc(String::from_utf8_lossy(&bytes)).to_string()] {
                prop_assert!(out.bytes().all(|b| (b' '..=b'~').contains(&b)), "{out:?}");
                prop_assert!(out.starts_with('"') && out.ends_with('"'));
                // At most 10 output bytes per shown character (\u{10ffff}).
                prop_assert!(out.len() <= 2 + SHOWN_MAX * 10 + 16);
            }
            let plain: String = bytes.iter().map(|&b| char::from(b' ' + b % 95)).filter(|&c| c != '"' && c != '\\').take(SHOWN_MAX).collect();
            prop_assert_eq!(esc(&plain).to_string(), format!("\"{plain}\""));
        }
    }
}
