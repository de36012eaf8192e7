//! AWS Signature Version 4 (`AWS4-HMAC-SHA256`) for one request, and the UTC date arithmetic it
//! and the notifications need (no date crate in a plugin).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The credentials a request is signed with.
pub struct Credentials<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    /// A temporary credential's session token (`x-amz-security-token`), signed with the rest.
    pub session_token: Option<&'a str>,
}

/// What is signed: the request as the server will see it.
pub struct Request<'a> {
    pub method: &'a str,
    /// The `Host` header: the URL's host, with its port when it is not the scheme's default.
    pub host: &'a str,
    /// The canonical URI: the absolute path, made of unreserved characters and `/` only (so
    /// that its URI encoding is itself).
    pub path: &'a str,
    /// The canonical query string (parameters sorted and encoded), or empty.
    pub query: &'a str,
    /// Further headers to sign, such as `content-type`.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The signing key of a day (`YYYYMMDD`), region and service.
pub fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> Vec<u8> {
    let date = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let region = hmac(&date, region.as_bytes());
    let service = hmac(&region, service.as_bytes());
    hmac(&service, b"aws4_request")
}

/// The headers to add to the request: `x-amz-date`, `x-amz-security-token` when there is a
/// session token, and `authorization`.
pub fn sign(
    request: &Request,
    credentials: &Credentials,
    region: &str,
    service: &str,
    now_ms: i64,
) -> Vec<(String, String)> {
    let amz_date = amz_date(now_ms);
    let day = &amz_date[..8];
    let mut added = vec![("x-amz-date".to_string(), amz_date.clone())];
    if let Some(token) = credentials.session_token {
        added.push(("x-amz-security-token".to_string(), token.to_string()));
    }
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), canonical_value(value)))
        .chain([("host".to_string(), request.host.to_string())])
        .chain(added.iter().cloned())
        .collect();
    headers.sort();
    let canonical_headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect();
    let signed_headers = headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        request.path,
        request.query,
        hex::encode(Sha256::digest(request.body)),
    );
    let scope = format!("{day}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(credentials.secret_access_key, day, region, service);
    let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    added.push((
        "authorization".to_string(),
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    added
}

/// A header value as SigV4 signs it: trimmed, inner runs of spaces made one.
fn canonical_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time in milliseconds.
pub fn amz_date(now_ms: i64) -> String {
    let seconds = now_ms.div_euclid(1000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The date of a day count since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day count since 1970-01-01 of a date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the epoch of an ISO 8601 UTC time as AWS writes them
/// (`2016-01-27T14:59:38.237Z`, fractions optional, `Z` or `+00:00`).
pub fn parse_iso8601(text: &str) -> Option<i64> {
    let text = text.trim();
    let bytes = text.as_bytes();
    if bytes.len() < 19 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    if !matches!(rest, "Z" | "z" | "+00:00" | "") {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second.min(60) * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example credentials of AWS's Signature Version 4 test suite.
    const SUITE: Credentials = Credentials {
        access_key_id: "AKIDEXAMPLE",
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        session_token: None,
    };
    /// 2015-08-30T12:36:00Z, the suite's time.
    const SUITE_TIME: i64 = 1_440_938_160_000;

    fn authorization(request: &Request) -> String {
        let headers = sign(request, &SUITE, "us-east-1", "service", SUITE_TIME);
        assert_eq!(headers[0], ("x-amz-date".into(), "20150830T123600Z".into()));
        headers.last().unwrap().1.clone()
    }

    fn suite_request(method: &'static str, query: &'static str) -> Request<'static> {
        Request {
            method,
            host: "example.amazonaws.com",
            path: "/",
            query,
            headers: &[],
            body: b"",
        }
    }

    /// "Derive a signing key for Signature Version 4": the documented example key.
    #[test]
    fn derives_the_documented_signing_key() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex::encode(key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    /// The suite's `get-vanilla`, `post-vanilla` and `get-vanilla-query-order-key-case`.
    #[test]
    fn signs_the_test_suite_vectors() {
        let prefix = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=";
        assert_eq!(
            authorization(&suite_request("GET", "")),
            format!("{prefix}5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        );
        assert_eq!(
            authorization(&suite_request("POST", "")),
            format!("{prefix}5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
        );
        assert_eq!(
            authorization(&suite_request("GET", "Param1=value1&Param2=value2")),
            format!("{prefix}b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        );
    }

    #[test]
    fn a_session_token_is_signed() {
        let credentials = Credentials {
            session_token: Some("token"),
            ..SUITE
        };
        let headers = sign(
            &suite_request("GET", ""),
            &credentials,
            "us-east-1",
            "service",
            SUITE_TIME,
        );
        assert_eq!(headers[1], ("x-amz-security-token".into(), "token".into()));
        assert!(
            headers[2]
                .1
                .contains("SignedHeaders=host;x-amz-date;x-amz-security-token")
        );
    }

    #[test]
    fn dates_both_ways() {
        assert_eq!(amz_date(SUITE_TIME), "20150830T123600Z");
        assert_eq!(amz_date(951_782_400_000), "20000229T000000Z");
        assert_eq!(parse_iso8601("2015-08-30T12:36:00.000Z"), Some(SUITE_TIME));
        assert_eq!(parse_iso8601("2015-08-30T12:36:00Z"), Some(SUITE_TIME));
        assert_eq!(
            parse_iso8601("2000-02-29T00:00:00.5Z"),
            Some(951_782_400_500)
        );
        assert_eq!(parse_iso8601("2015-08-30 12:36"), None);
        assert_eq!(parse_iso8601("2015-08-30T12:36:00+02:00"), None);
    }
}
