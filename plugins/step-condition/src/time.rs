//! RFC 3339 dates to Unix milliseconds, without a date library.

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
    if s.len() < 10 || s.as_bytes()[4] != b'-' || s.as_bytes()[7] != b'-' {
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
