//! Times without a date library: RFC 3339 dates to Unix milliseconds, Unix milliseconds to the
//! fixed text form, and the stored date forms compared as text.

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` into Unix milliseconds.
pub fn parse(s: &str) -> Option<i64> {
    let s = s.trim();
    // Every form is ASCII, and the fields below are found by their byte offsets, which are
    // character boundaries only in ASCII text.
    if !s.is_ascii() || s.len() < 10 || s.as_bytes()[4] != b'-' || s.as_bytes()[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(&s[0..4])?, num(&s[5..7])?, num(&s[8..10])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut ms = days_from_civil(y, m, d) * 86_400_000;
    let rest = &s[10..];
    if rest.is_empty() {
        return Some(ms);
    }
    let rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' '))?;
    if rest.len() < 8 || &rest[2..3] != ":" || &rest[5..6] != ":" {
        return None;
    }
    let (h, mi, sec) = (num(&rest[0..2])?, num(&rest[3..5])?, num(&rest[6..8])?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    ms += ((h * 60 + mi) * 60 + sec) * 1000;
    let mut rest = &rest[8..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut f = frac[..digits.min(3)].to_string();
        while f.len() < 3 {
            f.push('0');
        }
        ms += num(&f)?;
        rest = &frac[digits..];
    }
    match rest {
        "Z" | "z" => Some(ms),
        _ if rest.len() == 6 && &rest[3..4] == ":" => {
            let sign = match &rest[0..1] {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let offset = (num(&rest[1..3])? * 60 + num(&rest[4..6])?) * 60_000;
            Some(ms - sign * offset)
        }
        _ => None,
    }
}

/// The civil date (year, month, day) of a count of days since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The earliest and latest times [`format`] writes as themselves (years 0000 to 9999).
const MIN_MS: i64 = -62_167_219_200_000;
const MAX_MS: i64 = 253_402_300_799_999;

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.sssZ`, clamped to years 0000 to 9999 so that the
/// text always has that form (and compares as text in time order).
pub fn format(ms: i64) -> String {
    let ms = ms.clamp(MIN_MS, MAX_MS);
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, f) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{f:03}Z")
}

/// The SQLite `GLOB` patterns and PostgreSQL regular expressions of the two stored forms
/// [`stored`] accepts, in that order (seconds, then milliseconds).
pub const GLOB_SECONDS: &str =
    "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z";
/// See [`GLOB_SECONDS`].
pub const GLOB_MILLIS: &str =
    "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z";
/// See [`GLOB_SECONDS`].
pub const REGEX_SECONDS: &str = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$";
/// See [`GLOB_SECONDS`].
pub const REGEX_MILLIS: &str =
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{3}Z$";

/// A stored date string in the one form compared as text: `YYYY-MM-DDTHH:MM:SSZ` becomes
/// `YYYY-MM-DDTHH:MM:SS.000Z`, `YYYY-MM-DDTHH:MM:SS.sssZ` stays; anything else is `None`.
/// Only the shape is checked (digits where digits go), exactly as the SQL patterns do.
pub fn stored(s: &str) -> Option<String> {
    const SHAPE: &[u8; 24] = b"0000-00-00T00:00:00.000Z";
    let fits = |text: &[u8], shape: &[u8]| {
        text.len() == shape.len()
            && text.iter().zip(shape).all(|(&c, &p)| {
                if p == b'0' {
                    c.is_ascii_digit()
                } else {
                    c == p
                }
            })
    };
    let b = s.as_bytes();
    if b.len() == 20 && fits(&b[..19], &SHAPE[..19]) && b[19] == b'Z' {
        Some(format!("{}.000Z", &s[..19]))
    } else if fits(b, SHAPE) {
        Some(s.to_string())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_writes_the_fixed_form_and_parse_reads_it_back() {
        for ms in [
            0,
            1,
            999,
            1_700_000_000_123,
            -1,
            -86_400_001,
            MIN_MS,
            MAX_MS,
        ] {
            let text = format(ms);
            assert_eq!(text.len(), 24, "{text}");
            assert_eq!(parse(&text), Some(ms), "{text}");
        }
        assert_eq!(format(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format(i64::MIN), "0000-01-01T00:00:00.000Z");
        assert_eq!(format(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parse_refuses_text_that_is_not_ascii_wherever_it_is() {
        // Found by the `filter` fuzz target: byte offsets inside a character panicked.
        for bad in [
            "2026-01-0ϣ00:80:00Z",
            "2026-01-01Tϣ0:00:00Z",
            "2026-01-01T00:00:00.ϣZ",
            "2026-01-01T00:00:00+0ϣ:00",
            "ϣ026-01-01",
            "2026-01-01T00:00:00Zϣ",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse(" 1970-01-02 "), Some(86_400_000));
    }

    #[test]
    fn stored_accepts_two_forms_only() {
        assert_eq!(
            stored("2024-01-02T03:04:05Z").as_deref(),
            Some("2024-01-02T03:04:05.000Z")
        );
        assert_eq!(
            stored("2024-01-02T03:04:05.678Z").as_deref(),
            Some("2024-01-02T03:04:05.678Z")
        );
        for bad in [
            "2024-01-02",
            "2024-01-02T03:04:05+00:00",
            "2024-01-02T03:04:05.6Z",
            "2024-01-02t03:04:05Z",
            "2024-01-02T03:04:05z",
            "2024-01-02 03:04:05Z",
            "２024-01-02T03:04:05Z",
        ] {
            assert_eq!(stored(bad), None, "{bad}");
        }
    }
}
