//! Cross-site request forgery: a state-changing request (any method but GET, HEAD, OPTIONS) that
//! carries the dashboard session cookie and no API key must come from Herald's own pages. A
//! browser says where a request comes from in `Sec-Fetch-Site` (every current browser) and in
//! `Origin` (on every cross-origin request, and on same-origin ones but GET/HEAD); either one
//! that names another site is refused with 403. Requests with neither header come from programs,
//! not from a page another site controls, and pass. API-key requests are never checked: a page on
//! another site cannot make a browser add a key.

use poem::Request;
use poem::http::{Method, header};

use super::error::ApiError;
use super::extract::{SESSION_COOKIE, cookie_value};

/// The refusal for a cross-site, cookie-authenticated, state-changing request; `None` to let it
/// through. `public_url` is the service's public base URL: an `Origin` equal to it, or to the
/// request's own `Host`, is the service's own.
pub fn refusal(req: &Request, public_url: &str) -> Option<ApiError> {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || req.headers().contains_key(header::AUTHORIZATION)
        || cookie_value(req, SESSION_COOKIE).is_none_or(str::is_empty)
    {
        return None;
    }
    let text = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
    let cross_site = if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        // `none`: the user typed or bookmarked it; `same-origin`: Herald's own page.
        !matches!(site, "same-origin" | "none")
    } else if let Some(origin) = text(header::ORIGIN) {
        !own_origin(origin, text(header::HOST), public_url)
    } else {
        false
    };
    cross_site.then(|| {
        ApiError::forbidden(
            "a request with the dashboard session cookie must come from Herald's own pages",
        )
        .suggest("call the API from the dashboard at /app/, or authenticate with an API key (Authorization: Bearer sk_…)")
    })
}

/// Whether `origin` (`scheme://host[:port]`) is the service's: its public URL's origin, or the
/// request's `Host` (the address the browser used).
fn own_origin(origin: &str, host: Option<&str>, public_url: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    let public = public_url
        .split_once("://")
        .map(|(scheme, rest)| (scheme, rest.split('/').next().unwrap_or("")));
    if public.is_some_and(|(scheme, authority)| origin == format!("{scheme}://{authority}")) {
        return true;
    }
    let origin_authority = origin.split_once("://").map(|(_, a)| a);
    host.is_some_and(|h| origin_authority == Some(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().method(method).uri_str("/contacts");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.finish()
    }

    const PUBLIC: &str = "https://mail.example.com";

    #[test]
    fn cookie_requests_from_another_site_are_refused() {
        let cookie = ("cookie", "herald_token=abc");
        let host = ("host", "mail.example.com");
        for headers in [
            vec![cookie, host, ("sec-fetch-site", "cross-site")],
            vec![cookie, host, ("sec-fetch-site", "same-site")],
            vec![cookie, host, ("origin", "https://evil.example")],
            vec![cookie, host, ("origin", "null")],
        ] {
            let err = refusal(&request(Method::POST, &headers), PUBLIC)
                .unwrap_or_else(|| panic!("{headers:?} must be refused"));
            assert_eq!(err.status, 403);
        }
    }

    #[test]
    fn own_pages_programs_keys_and_reads_pass() {
        let cookie = ("cookie", "herald_token=abc");
        let cases: [(Method, Vec<(&str, &str)>); 7] = [
            (
                Method::POST,
                vec![cookie, ("sec-fetch-site", "same-origin")],
            ),
            (
                Method::DELETE,
                vec![cookie, ("origin", "https://mail.example.com")],
            ),
            (
                Method::PATCH,
                vec![
                    cookie,
                    ("host", "127.0.0.1:8080"),
                    ("origin", "http://127.0.0.1:8080"),
                ],
            ),
            // A program: no Origin, no Sec-Fetch-Site.
            (Method::POST, vec![cookie]),
            // An API key: a page on another site cannot add one.
            (
                Method::POST,
                vec![
                    cookie,
                    ("authorization", "Bearer sk_x"),
                    ("origin", "https://evil.example"),
                ],
            ),
            // No session cookie: nothing for a forged request to ride on.
            (Method::POST, vec![("origin", "https://evil.example")]),
            (Method::GET, vec![cookie, ("sec-fetch-site", "cross-site")]),
        ];
        for (method, headers) in cases {
            assert!(
                refusal(&request(method.clone(), &headers), PUBLIC).is_none(),
                "{method} {headers:?} must pass"
            );
        }
    }
}
