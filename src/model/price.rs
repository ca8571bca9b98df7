//! Fixed-point prices.
//!
//! A price is an `i64` mantissa scaled by `10^-digits`, where `digits` is the
//! instrument's decimal exponent (EURUSD 5: 1.08123 is `108123`). The engine
//! never touches floating point; conversion to and from text happens only at
//! the edges (config, import, display), and is exact.

use std::fmt;

/// Mantissa of a fixed-point price in points (units of `10^-digits`).
pub type Mantissa = i64;

/// Sentinel for "no bid" / "no ask": the side is absent.
pub const NO_PRICE: Mantissa = i64::MIN;

/// Largest accepted price mantissa: far above any real price at any digit
/// count, and low enough that markups and mid arithmetic cannot overflow.
pub const PRICE_MAX: Mantissa = i64::MAX / 4;

/// Largest supported decimal exponent; `10^9` still leaves 9 integer digits
/// of headroom in an `i64` mantissa.
pub const DIGITS_MAX: u8 = 9;

/// Powers of ten for every supported digit count.
pub const POW10: [i64; DIGITS_MAX as usize + 1] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// Why a decimal string could not become a fixed-point price.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceParseError {
    /// The string was empty (or only a sign).
    #[error("empty price")]
    Empty,
    /// A character other than a digit, one `.` and a leading sign.
    #[error("invalid character {0:?} in price")]
    InvalidChar(char),
    /// Non-zero decimals past the instrument's `digits`; rounding is refused
    /// (trailing zeros past `digits` are accepted).
    #[error("price has {found} decimals, instrument allows {digits}")]
    TooManyDecimals {
        /// Position of the last non-zero decimal in the string.
        found: usize,
        /// Decimals the instrument allows.
        digits: u8,
    },
    /// The mantissa does not fit in an `i64`.
    #[error("price out of range")]
    Overflow,
    /// `digits` above [`DIGITS_MAX`].
    #[error("digits {0} above the maximum {DIGITS_MAX}")]
    DigitsOutOfRange(u8),
}

/// Parses a decimal string (`"1.08123"`, `"-0.5"`, `"150"`) into a mantissa
/// with `digits` decimals. Extra decimals are refused rather than rounded:
/// silently rounding a provider price would invent a price nobody quoted.
/// Trailing zeros beyond `digits` are accepted (`"1.081230"` at 5 digits).
pub fn parse_price(text: &str, digits: u8) -> Result<Mantissa, PriceParseError> {
    parse_price_bytes(text.as_bytes(), digits)
}

/// Byte-slice form of [`parse_price`], for decoders that never build a `str`.
pub fn parse_price_bytes(text: &[u8], digits: u8) -> Result<Mantissa, PriceParseError> {
    if digits > DIGITS_MAX {
        return Err(PriceParseError::DigitsOutOfRange(digits));
    }
    let (negative, body) = match text.first() {
        None => return Err(PriceParseError::Empty),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    if body.is_empty() {
        return Err(PriceParseError::Empty);
    }
    let mut mantissa: i64 = 0;
    let mut decimals: Option<usize> = None;
    let mut significant_decimals = 0usize;
    for &b in body {
        match b {
            b'.' if decimals.is_none() => decimals = Some(0),
            b'0'..=b'9' => {
                if let Some(d) = decimals.as_mut() {
                    *d += 1;
                    if *d > digits as usize {
                        if b != b'0' {
                            significant_decimals = *d;
                        }
                        continue;
                    }
                }
                mantissa = mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(i64::from(b - b'0')))
                    .ok_or(PriceParseError::Overflow)?;
            }
            other => return Err(PriceParseError::InvalidChar(other as char)),
        }
    }
    if significant_decimals > 0 {
        return Err(PriceParseError::TooManyDecimals {
            found: significant_decimals,
            digits,
        });
    }
    let seen = decimals.unwrap_or(0).min(digits as usize);
    let scale = POW10[digits as usize - seen];
    mantissa = mantissa
        .checked_mul(scale)
        .ok_or(PriceParseError::Overflow)?;
    Ok(if negative { -mantissa } else { mantissa })
}

/// Converts a mantissa at `from` digits to `to` digits. Widening is exact;
/// narrowing truncates toward zero and is only used for display.
pub fn rescale(mantissa: Mantissa, from: u8, to: u8) -> Mantissa {
    debug_assert!(from <= DIGITS_MAX && to <= DIGITS_MAX);
    if to >= from {
        mantissa.saturating_mul(POW10[(to - from) as usize])
    } else {
        mantissa / POW10[(from - to) as usize]
    }
}

/// Display adapter: `FixedPrice(108123, 5)` prints `1.08123`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedPrice(pub Mantissa, pub u8);

impl fmt::Display for FixedPrice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FixedPrice(m, digits) = *self;
        if m == NO_PRICE {
            return f.write_str("-");
        }
        if digits == 0 {
            return write!(f, "{m}");
        }
        let scale = POW10[digits as usize].unsigned_abs();
        let sign = if m < 0 { "-" } else { "" };
        let abs = m.unsigned_abs();
        write!(
            f,
            "{sign}{}.{:0width$}",
            abs / scale,
            abs % scale,
            width = digits as usize
        )
    }
}

/// Converts a floating value to the nearest mantissa. Only for edges that
/// receive floats from outside (a provider's double, a plot); never used in
/// the engine.
pub fn from_f64(value: f64, digits: u8) -> Mantissa {
    (value * POW10[digits as usize] as f64).round() as Mantissa
}

/// Mantissa as a float, for display and plots only.
pub fn to_f64(mantissa: Mantissa, digits: u8) -> f64 {
    mantissa as f64 / POW10[digits as usize] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_every_digit_count() {
        for digits in 0..=DIGITS_MAX {
            for &m in &[0i64, 1, 7, 12345, 108_123, 999_999_999, -42, -1] {
                let text = FixedPrice(m, digits).to_string();
                assert_eq!(parse_price(&text, digits), Ok(m), "{text} at {digits}");
            }
        }
    }

    #[test]
    fn parses_fewer_decimals_than_digits() {
        assert_eq!(parse_price("1.1", 5), Ok(110_000));
        assert_eq!(parse_price("150", 3), Ok(150_000));
        assert_eq!(parse_price("2650.5", 2), Ok(265_050));
        assert_eq!(parse_price("5321.7", 1), Ok(53_217));
        assert_eq!(parse_price("38000", 0), Ok(38_000));
        assert_eq!(parse_price(".5", 1), Ok(5));
    }

    #[test]
    fn formats_known_instruments() {
        assert_eq!(FixedPrice(108_123, 5).to_string(), "1.08123");
        assert_eq!(FixedPrice(149_872, 3).to_string(), "149.872");
        assert_eq!(FixedPrice(265_012, 2).to_string(), "2650.12");
        assert_eq!(FixedPrice(53_217, 1).to_string(), "5321.7");
        assert_eq!(FixedPrice(-5, 2).to_string(), "-0.05");
        assert_eq!(FixedPrice(NO_PRICE, 2).to_string(), "-");
    }

    #[test]
    fn refuses_extra_significant_decimals_but_accepts_zeros() {
        assert_eq!(
            parse_price("1.081234", 5),
            Err(PriceParseError::TooManyDecimals {
                found: 6,
                digits: 5
            })
        );
        assert_eq!(parse_price("1.081230", 5), Ok(108_123));
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(parse_price("", 5), Err(PriceParseError::Empty));
        assert_eq!(parse_price("-", 5), Err(PriceParseError::Empty));
        assert_eq!(
            parse_price("1.2.3", 5),
            Err(PriceParseError::InvalidChar('.'))
        );
        assert_eq!(
            parse_price("1e5", 5),
            Err(PriceParseError::InvalidChar('e'))
        );
        assert_eq!(
            parse_price("99999999999999999999", 0),
            Err(PriceParseError::Overflow)
        );
        assert_eq!(
            parse_price("1", 10),
            Err(PriceParseError::DigitsOutOfRange(10))
        );
    }

    #[test]
    fn rescale_widens_exactly_and_narrows_by_truncation() {
        assert_eq!(rescale(108_123, 5, 7), 10_812_300);
        assert_eq!(rescale(10_812_399, 7, 5), 108_123);
        assert_eq!(from_f64(1.08123, 5), 108_123);
        assert!((to_f64(108_123, 5) - 1.08123).abs() < 1e-12);
    }
}
