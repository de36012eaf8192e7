//! Open and click tracking of an HTML body: links become redirects through the service (which
//! only ever redirect to the links that were in the email), and a 1×1 pixel reports opens.

/// The HTML with its `http(s)` links replaced by `redirect(index)` and the original links, in
/// index order. Links equal to one of `keep` (the subscription pages) are left alone, as are
/// `mailto:`, `tel:` and fragment links.
pub fn rewrite_links(
    html: &str,
    keep: &[&str],
    redirect: impl Fn(usize) -> String,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(html.len() + 64);
    let mut links = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut pos = 0;
    while let Some(found) = lower[pos..].find("<a") {
        let tag_start = pos + found;
        // `<a` must be followed by whitespace to be an anchor (not `<abbr>`).
        let after = lower.as_bytes().get(tag_start + 2).copied();
        let Some(tag_end) = lower[tag_start..].find('>').map(|e| tag_start + e) else {
            break;
        };
        if !matches!(after, Some(b' ' | b'\t' | b'\n' | b'\r')) {
            out.push_str(&html[pos..=tag_end]);
            pos = tag_end + 1;
            continue;
        }
        let tag = &lower[tag_start..tag_end];
        let Some(href) = find_href(tag) else {
            out.push_str(&html[pos..=tag_end]);
            pos = tag_end + 1;
            continue;
        };
        let (value_start, value_end) = (tag_start + href.0, tag_start + href.1);
        let url = decode_entities(html[value_start..value_end].trim());
        let lower_url = url.to_ascii_lowercase();
        let trackable = (lower_url.starts_with("http://") || lower_url.starts_with("https://"))
            && !keep.iter().any(|k| *k == url);
        out.push_str(&html[pos..value_start]);
        if trackable {
            out.push_str(&redirect(links.len()));
            links.push(url);
        } else {
            out.push_str(&html[value_start..value_end]);
        }
        out.push_str(&html[value_end..=tag_end]);
        pos = tag_end + 1;
    }
    out.push_str(&html[pos..]);
    (out, links)
}

/// The byte range of the `href` value inside a lower-cased tag.
fn find_href(tag: &str) -> Option<(usize, usize)> {
    let mut search = 0;
    while let Some(i) = tag[search..].find("href") {
        let at = search + i;
        let before_ok = at > 0 && tag.as_bytes()[at - 1].is_ascii_whitespace();
        let rest = &tag[at + 4..];
        let trimmed = rest.trim_start();
        if before_ok && trimmed.starts_with('=') {
            let after_eq = &trimmed[1..];
            let value = after_eq.trim_start();
            let offset = tag.len() - value.len();
            return match value.as_bytes().first() {
                Some(q @ (b'"' | b'\'')) => {
                    let end = value[1..].find(*q as char)?;
                    Some((offset + 1, offset + 1 + end))
                }
                Some(_) => {
                    let end = value
                        .find(|c: char| c.is_ascii_whitespace())
                        .unwrap_or(value.len());
                    Some((offset, offset + end))
                }
                None => None,
            };
        }
        search = at + 4;
    }
    None
}

fn decode_entities(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&#38;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// The HTML with an invisible open pixel at the end of its body.
pub fn add_open_pixel(html: &str, pixel_url: &str) -> String {
    let img = open_pixel(pixel_url);
    match html.to_ascii_lowercase().rfind("</body>") {
        Some(i) => format!("{}{img}{}", &html[..i], &html[i..]),
        None => format!("{html}{img}"),
    }
}

/// The open pixel's tag.
fn open_pixel(pixel_url: &str) -> String {
    format!(
        r#"<img src="{pixel_url}" width="1" height="1" alt="" style="display:none;border:0;width:1px;height:1px">"#
    )
}

/// `html` without the open pixel [`add_open_pixel`] added for `pixel_url` (the "view in
/// browser" page shows the email without recording an open).
pub fn remove_open_pixel(html: &str, pixel_url: &str) -> String {
    html.replacen(&open_pixel(pixel_url), "", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_rewritten_and_remembered() {
        let html = r#"<p><a href="https://a.example/x?y=1&amp;z=2">A</a> <A class=b HREF='http://b.example'>B</A>
<a href="mailto:x@y.z">m</a> <abbr>no</abbr> <a name=top>t</a> <a href=https://c.example/>c</a>
<a href="https://h.example/unsubscribe/tok">u</a></p>"#;
        let (out, links) = rewrite_links(html, &["https://h.example/unsubscribe/tok"], |i| {
            format!("https://h.example/t/c/{i}")
        });
        assert_eq!(
            links,
            [
                "https://a.example/x?y=1&z=2",
                "http://b.example",
                "https://c.example/"
            ]
        );
        assert!(
            out.contains(r#"<a href="https://h.example/t/c/0">A</a>"#),
            "{out}"
        );
        assert!(out.contains(r#"HREF='https://h.example/t/c/1'"#), "{out}");
        assert!(
            out.contains(r#"<a href=https://h.example/t/c/2>c</a>"#),
            "{out}"
        );
        assert!(out.contains("mailto:x@y.z"));
        assert!(out.contains("https://h.example/unsubscribe/tok"));
        assert!(out.contains("<abbr>no</abbr>"));
    }

    #[test]
    fn the_pixel_goes_before_the_end_of_the_body() {
        let out = add_open_pixel("<html><body><p>Hi</p></BODY></html>", "https://p/x");
        assert!(out.contains(r#"<p>Hi</p><img src="https://p/x""#), "{out}");
        assert!(out.ends_with("</BODY></html>"));
        assert!(add_open_pixel("<p>Hi</p>", "u").starts_with("<p>Hi</p><img"));
    }
}
