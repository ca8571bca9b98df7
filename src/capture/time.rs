//! Calendar arithmetic for timestamps in tick files: civil date and time
//! to UTC nanoseconds and back, with no time-zone database (every format
//! handled here has a fixed offset). Pure integer code, no allocation.

/// Nanoseconds per second.
pub const NS_PER_S: i64 = 1_000_000_000;
/// Nanoseconds per minute.
pub const NS_PER_MIN: i64 = 60 * NS_PER_S;
/// Nanoseconds per hour.
pub const NS_PER_HOUR: i64 = 60 * NS_PER_MIN;
/// Nanoseconds per day (no leap seconds).
pub const NS_PER_DAY: i64 = 24 * NS_PER_HOUR;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`). `month` is 1-based.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// A civil date-time with nanoseconds, as read from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// Year, proleptic Gregorian; [`CivilTime::to_utc_ns`] accepts 1970..=2400.
    pub year: i64,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of the month, 1-based.
    pub day: u32,
    /// Hour, 0..=23.
    pub hour: u32,
    /// Minute, 0..=59.
    pub minute: u32,
    /// Second, 0..=60 (a leap second is accepted).
    pub second: u32,
    /// Nanoseconds within the second, below 1e9.
    pub nanos: u32,
}

impl CivilTime {
    /// From a (year, month, day) date, an (hour, minute, second) time of
    /// day and nanoseconds.
    pub fn new(date: (u32, u32, u32), hms: (u32, u32, u32), nanos: u32) -> CivilTime {
        CivilTime {
            year: i64::from(date.0),
            month: date.1,
            day: date.2,
            hour: hms.0,
            minute: hms.1,
            second: hms.2,
            nanos,
        }
    }

    /// Nanoseconds since the epoch, taking the fields as local time at
    /// `offset_ns` east of UTC (so UTC = local - offset). `None` when a
    /// field is out of range or the result is before 1970.
    pub fn to_utc_ns(&self, offset_ns: i64) -> Option<u64> {
        let valid = (1970..=2400).contains(&self.year)
            && (1..=12).contains(&self.month)
            && self.day >= 1
            && self.day <= days_in_month(self.year, self.month)
            && self.hour < 24
            && self.minute < 60
            && self.second < 61
            && self.nanos < 1_000_000_000;
        if !valid {
            return None;
        }
        let days = days_from_civil(self.year, self.month, self.day);
        let ns = days * NS_PER_DAY
            + i64::from(self.hour) * NS_PER_HOUR
            + i64::from(self.minute) * NS_PER_MIN
            + i64::from(self.second) * NS_PER_S
            + i64::from(self.nanos)
            - offset_ns;
        u64::try_from(ns).ok()
    }
}

/// Parses exactly `n` ASCII digits at `b[*pos..]`.
#[inline]
pub fn digits(b: &[u8], pos: &mut usize, n: usize) -> Option<u32> {
    let s = b.get(*pos..*pos + n)?;
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    *pos += n;
    Some(v)
}

/// Expects byte `c` at `b[*pos]`.
#[inline]
pub fn expect(b: &[u8], pos: &mut usize, c: u8) -> Option<()> {
    (b.get(*pos) == Some(&c)).then(|| *pos += 1)
}

/// Parses an optional fraction `.d{1,9}` at `b[*pos..]`; returns nanos.
#[inline]
pub fn fraction(b: &[u8], pos: &mut usize, sep: u8) -> Option<u32> {
    if b.get(*pos) != Some(&sep) {
        return Some(0);
    }
    *pos += 1;
    let start = *pos;
    let mut v = 0u32;
    while let Some(&c) = b.get(*pos) {
        if !c.is_ascii_digit() {
            break;
        }
        if *pos - start == 9 {
            return None; // finer than a nanosecond cannot be kept exactly
        }
        v = v * 10 + u32::from(c - b'0');
        *pos += 1;
    }
    let n = *pos - start;
    if n == 0 {
        return None;
    }
    Some(v * 10u32.pow(9 - n as u32))
}

/// Parses a fixed offset `+HH:MM`, `-HH:MM`, `+HHMM`, `Z` or `UTC` into
/// nanoseconds east of UTC.
pub fn parse_offset(text: &str) -> Option<i64> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("z") || t.eq_ignore_ascii_case("utc") {
        return Some(0);
    }
    let b = t.as_bytes();
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut pos = 1;
    let h = digits(b, &mut pos, 2)?;
    if b.get(pos) == Some(&b':') {
        pos += 1;
    }
    let m = digits(b, &mut pos, 2)?;
    (pos == b.len() && h <= 23 && m <= 59)
        .then(|| sign * (i64::from(h) * NS_PER_HOUR + i64::from(m) * NS_PER_MIN))
}

/// Reads a date `YYYY` `MM` `DD`, the parts separated by `sep` (none for
/// the compact `YYYYMMDD`).
pub fn date(b: &[u8], p: &mut usize, sep: Option<u8>) -> Option<(u32, u32, u32)> {
    let year = digits(b, p, 4)?;
    if let Some(c) = sep {
        expect(b, p, c)?;
    }
    let month = digits(b, p, 2)?;
    if let Some(c) = sep {
        expect(b, p, c)?;
    }
    let day = digits(b, p, 2)?;
    Some((year, month, day))
}

/// Parses ISO 8601 `YYYY-MM-DD[T ]HH:MM:SS[.f{1,9}][Z|+HH:MM|-HH:MM]`;
/// no zone means UTC.
pub fn parse_iso8601(b: &[u8]) -> Option<u64> {
    let mut p = 0;
    let ymd = date(b, &mut p, Some(b'-'))?;
    if !matches!(b.get(p), Some(b'T' | b't' | b' ')) {
        return None;
    }
    p += 1;
    let hour = digits(b, &mut p, 2)?;
    expect(b, &mut p, b':')?;
    let minute = digits(b, &mut p, 2)?;
    expect(b, &mut p, b':')?;
    let second = digits(b, &mut p, 2)?;
    let nanos = fraction(b, &mut p, b'.')?;
    let offset = match &b[p..] {
        [] => 0,
        rest => parse_offset(std::str::from_utf8(rest).ok()?)?,
    };
    CivilTime::new(ymd, (hour, minute, second), nanos).to_utc_ns(offset)
}

/// Formats UTC nanoseconds as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub struct UtcNs(pub u64);

impl std::fmt::Display for UtcNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0 as i64;
        let days = ns.div_euclid(NS_PER_DAY);
        let rem = ns.rem_euclid(NS_PER_DAY);
        let (y, mo, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
            rem / NS_PER_HOUR,
            rem % NS_PER_HOUR / NS_PER_MIN,
            rem % NS_PER_MIN / NS_PER_S,
            rem % NS_PER_S
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trips() {
        for days in [-1000i64, 0, 1, 59, 365, 10_957, 19_737, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(2024, 1, 15), 19_737);
        assert_eq!(
            days_from_civil(2024, 3, 1) - days_from_civil(2024, 2, 28),
            2
        );
    }

    #[test]
    fn iso8601_with_zones() {
        let utc = parse_iso8601(b"2024-01-15T13:00:00.123Z").unwrap();
        assert_eq!(utc, 1_705_323_600_123_000_000);
        assert_eq!(parse_iso8601(b"2024-01-15 13:00:00.123"), Some(utc));
        assert_eq!(parse_iso8601(b"2024-01-15T15:00:00.123+02:00"), Some(utc));
        assert_eq!(parse_iso8601(b"2024-02-30T00:00:00"), None);
        assert_eq!(parse_iso8601(b"2024-01-15T13:00:00.1234567891"), None);
        assert_eq!(UtcNs(utc).to_string(), "2024-01-15T13:00:00.123000000Z");
    }

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("+02:00"), Some(2 * NS_PER_HOUR));
        assert_eq!(
            parse_offset("-0530"),
            Some(-(5 * NS_PER_HOUR + 30 * NS_PER_MIN))
        );
        assert_eq!(parse_offset("UTC"), Some(0));
        assert_eq!(parse_offset("2"), None);
    }
}
