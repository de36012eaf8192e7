//! The plain-text alternative of an HTML email, derived from the rendered HTML.
//!
//! A small, single-pass converter rather than a full HTML5 parser: it runs once per recipient on
//! the send path, and email HTML needs only a handful of rules (`docs/decisions.md`, "Templates").
//! It takes time linear in the input: every byte is read a bounded number of times (no scan of
//! the rest of the document per tag), and the text it writes is at most a constant times the
//! input (list indentation is capped at [`MAX_INDENT`] levels).

use std::borrow::Cow;

/// Converts rendered HTML to readable plain text:
///
/// - `<head>`, `<script>`, `<style>`, `<template>`, comments and doctypes are dropped;
/// - block elements (`p`, `div`, headings, `tr`, `li`, `blockquote`, …) start new lines, and
///   paragraphs, headings, lists, tables and `hr` are set apart by a blank line; `br` breaks the
///   line; table cells on one row are separated by a space;
/// - list items start with `- ` (or `1. `, `2. `, … in `<ol>`), indented by nesting;
/// - a link reads `text (url)`, or just its text when the text already is the URL (also for
///   `mailto:`) or the link goes nowhere (`#…`, `javascript:`); an image reads as its `alt`;
/// - entities are decoded, white space is collapsed (kept in `<pre>`), `&nbsp;` is a space,
///   and there is never more than one blank line in a row;
/// - as in a browser, a tag the input ends inside (`<a href="x` with no `>`) shows nothing.
pub fn html_to_text(html: &str) -> String {
    let mut c = Converter::default();
    let bytes = html.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'<' {
            let end = html[i..].find('<').map_or(html.len(), |n| i + n);
            c.text(&decode(&html[i..end]));
            i = end;
            continue;
        }
        let rest = &html[i..];
        if let Some(comment) = rest.strip_prefix("<!--") {
            i = comment.find("-->").map_or(html.len(), |n| i + 4 + n + 3);
        } else if rest.starts_with("<!") || rest.starts_with("<?") {
            i = rest.find('>').map_or(html.len(), |n| i + n + 1);
        } else if let Some(parsed) = Tag::parse(rest) {
            let Some(tag) = parsed else {
                // The input ends inside the tag: a browser shows none of it.
                break;
            };
            i += tag.len;
            if !tag.closing && !tag.self_closing && SKIPPED.contains(&tag.name.as_str()) {
                i = skip_element(html, i, &tag.name);
            } else {
                c.tag(&tag);
            }
        } else {
            c.text("<");
            i += 1;
        }
    }
    c.finish()
}

/// Elements whose content is not text.
const SKIPPED: [&str; 6] = ["head", "script", "style", "template", "noscript", "title"];
/// Elements set apart by a blank line.
const PARAGRAPHS: [&str; 13] = [
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "table",
    "pre",
    "blockquote",
    "hr",
];
/// Elements that start on a new line.
const BLOCKS: [&str; 20] = [
    "div",
    "li",
    "tr",
    "dl",
    "dt",
    "dd",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "main",
    "aside",
    "figure",
    "figcaption",
    "address",
    "center",
    "form",
    "fieldset",
    "body",
];

/// Deepest list nesting shown by indentation; deeper items are indented as this level.
const MAX_INDENT: usize = 8;
/// Open links tracked at once; the `<a>` deeper than this are read as plain text.
const MAX_OPEN_LINKS: usize = 8;

/// The offset after the end tag of `name` that closes an element starting before `from`
/// (compared without regard to case, in place: nothing is copied).
fn skip_element(html: &str, from: usize, name: &str) -> usize {
    let bytes = html.as_bytes();
    let mut p = from;
    while let Some(n) = memchr(b'<', &bytes[p..]) {
        let at = p + n;
        let after = at + 2 + name.len();
        if bytes.get(at + 1) == Some(&b'/')
            && bytes
                .get(at + 2..after)
                .is_some_and(|b| b.eq_ignore_ascii_case(name.as_bytes()))
        {
            return memchr(b'>', &bytes[after..]).map_or(html.len(), |m| after + m + 1);
        }
        p = at + 1;
    }
    html.len()
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

fn decode(s: &str) -> Cow<'_, str> {
    if s.contains('&') {
        html_escape::decode_html_entities(s)
    } else {
        Cow::Borrowed(s)
    }
}

/// A start or end tag.
struct Tag {
    /// Lower-case name.
    name: String,
    closing: bool,
    self_closing: bool,
    /// `href` (of `a`) or `alt` (of `img`), decoded.
    attribute: Option<String>,
    /// Bytes of the source the tag spans.
    len: usize,
}

impl Tag {
    /// Parses the tag at the start of `s` (which starts with `<`): `None` when it is not one
    /// (`<` not followed by a name), `Some(None)` when `s` ends inside it. Reads up to the
    /// tag's end and no further, so parsing every tag of a document reads it once.
    fn parse(s: &str) -> Option<Option<Tag>> {
        let bytes = s.as_bytes();
        let mut p = 1;
        let closing = bytes.get(p) == Some(&b'/');
        if closing {
            p += 1;
        }
        let start = p;
        while p < bytes.len() && (bytes[p].is_ascii_alphanumeric() || bytes[p] == b'-') {
            p += 1;
        }
        if p == start || !bytes[start].is_ascii_alphabetic() {
            return None;
        }
        let name = s[start..p].to_ascii_lowercase();
        let wanted = match name.as_str() {
            "a" if !closing => Some("href"),
            "img" => Some("alt"),
            _ => None,
        };
        let mut attribute = None;
        let mut self_closing = false;
        // Attributes: name, optionally `=` and a quoted or bare value.
        loop {
            while p < bytes.len() && bytes[p].is_ascii_whitespace() {
                p += 1;
            }
            match bytes.get(p) {
                None => return Some(None),
                Some(b'>') => {
                    p += 1;
                    break;
                }
                Some(b'/') => {
                    self_closing = bytes.get(p + 1) == Some(&b'>');
                    p += 1;
                    continue;
                }
                _ => {}
            }
            let key_start = p;
            while p < bytes.len() && !matches!(bytes[p], b'=' | b'>' | b'/') {
                if bytes[p].is_ascii_whitespace() {
                    break;
                }
                p += 1;
            }
            let key = &s[key_start..p];
            while p < bytes.len() && bytes[p].is_ascii_whitespace() {
                p += 1;
            }
            if bytes.get(p) != Some(&b'=') {
                if p == key_start {
                    p += 1;
                }
                continue;
            }
            p += 1;
            while p < bytes.len() && bytes[p].is_ascii_whitespace() {
                p += 1;
            }
            let value = match bytes.get(p) {
                Some(&q @ (b'"' | b'\'')) => {
                    let Some(n) = memchr(q, &bytes[p + 1..]) else {
                        return Some(None);
                    };
                    let end = n + p + 1;
                    let v = &s[p + 1..end];
                    p = end + 1;
                    v
                }
                _ => {
                    let v_start = p;
                    while p < bytes.len() && !bytes[p].is_ascii_whitespace() && bytes[p] != b'>' {
                        p += 1;
                    }
                    &s[v_start..p]
                }
            };
            if wanted.is_some_and(|w| key.eq_ignore_ascii_case(w)) {
                attribute = Some(decode(value).trim().to_string());
            }
        }
        Some(Some(Tag {
            name,
            closing,
            self_closing,
            attribute,
            len: p,
        }))
    }
}

/// An open `<a>`: where its text starts in the output, and its target.
struct Link {
    start: usize,
    href: Option<String>,
}

#[derive(Default)]
struct Converter {
    out: String,
    /// A collapsed space is owed before the next text on this line.
    space: bool,
    /// Newlines owed before the next text (1: new line, 2: blank line).
    breaks: usize,
    pre: usize,
    links: Vec<Link>,
    /// `<a>` opened beyond [`MAX_OPEN_LINKS`] and not yet closed.
    untracked_links: usize,
    /// Open lists: `None` for `ul`, the next number for `ol`.
    lists: Vec<Option<u32>>,
}

impl Converter {
    fn text(&mut self, s: &str) {
        if self.pre > 0 {
            for c in s.chars() {
                if c == '\n' {
                    self.out.push('\n');
                } else {
                    self.put(if c == '\u{a0}' { ' ' } else { c });
                }
            }
            return;
        }
        for (k, word) in s.split(char::is_whitespace).enumerate() {
            if k > 0 {
                self.space = true;
            }
            if !word.is_empty() {
                self.push_str(word);
            }
        }
    }

    /// Writes one visible character, settling owed breaks and spaces first.
    fn put(&mut self, c: char) {
        let mut buf = [0; 4];
        self.push_str(c.encode_utf8(&mut buf));
    }

    /// Writes visible text, settling owed breaks and spaces first.
    fn push_str(&mut self, s: &str) {
        self.settle();
        if self.space && !self.out.is_empty() && !self.out.ends_with(['\n', ' ']) {
            self.out.push(' ');
        }
        self.space = false;
        self.out.push_str(s);
    }

    /// Writes the line breaks owed.
    fn settle(&mut self) {
        if self.breaks > 0 {
            if !self.out.is_empty() {
                trim_end_spaces(&mut self.out);
                // Only the last `breaks` bytes matter: never a scan of a long run of newlines.
                let have = self
                    .out
                    .bytes()
                    .rev()
                    .take(self.breaks)
                    .take_while(|&b| b == b'\n')
                    .count();
                for _ in have..self.breaks {
                    self.out.push('\n');
                }
            }
            self.breaks = 0;
            self.space = false;
        }
    }

    fn block(&mut self, newlines: usize) {
        self.breaks = self.breaks.max(newlines);
    }

    fn tag(&mut self, tag: &Tag) {
        let name = tag.name.as_str();
        match name {
            "br" => {
                trim_end_spaces(&mut self.out);
                if self.breaks > 0 {
                    // A break already owed (from a block end) counts as this line's end.
                    self.breaks += 1;
                } else {
                    self.out.push('\n');
                }
                self.space = false;
            }
            "td" | "th" if !tag.closing => self.space = true,
            "pre" => {
                self.pre = if tag.closing {
                    self.pre.saturating_sub(1)
                } else {
                    self.pre + 1
                };
                self.block(2);
            }
            "ul" | "ol" => {
                if tag.closing {
                    self.lists.pop();
                } else {
                    self.lists.push((name == "ol").then_some(1));
                }
                self.block(if self.lists.is_empty() { 2 } else { 1 });
            }
            "li" if !tag.closing => {
                self.block(1);
                let depth = self.lists.len().max(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => "- ".to_string(),
                };
                self.settle();
                self.out.push_str(&"  ".repeat(depth.min(MAX_INDENT) - 1));
                self.out.push_str(&marker);
                self.space = false;
            }
            "a" if !tag.closing && self.links.len() >= MAX_OPEN_LINKS => {
                self.untracked_links += 1;
            }
            "a" if tag.closing && self.untracked_links > 0 => self.untracked_links -= 1,
            "a" if !tag.closing => {
                self.links.push(Link {
                    start: self.out.len(),
                    href: tag.attribute.clone(),
                });
            }
            "a" => self.close_link(),
            "img" => {
                if let Some(alt) = tag.attribute.as_deref().filter(|a| !a.is_empty()) {
                    self.text(alt);
                }
            }
            _ if PARAGRAPHS.contains(&name) => self.block(2),
            _ if BLOCKS.contains(&name) => self.block(1),
            _ => {}
        }
    }

    fn close_link(&mut self) {
        let Some(link) = self.links.pop() else {
            return;
        };
        let Some(href) = link.href.filter(|h| {
            !h.is_empty()
                && !h.starts_with('#')
                && !h.to_ascii_lowercase().starts_with("javascript:")
        }) else {
            return;
        };
        let shown = href.strip_prefix("mailto:").unwrap_or(&href);
        let text = self.out.get(link.start..).unwrap_or("").trim();
        if text.is_empty() {
            self.push_str(shown);
        } else if text != shown && text != href {
            self.space = true;
            self.push_str(&format!("({shown})"));
        }
    }

    fn finish(mut self) -> String {
        trim_end_spaces(&mut self.out);
        let mut out = String::with_capacity(self.out.len());
        let mut newlines = 0;
        for line in self.out.split('\n') {
            let line = line.trim_end();
            if line.is_empty() {
                newlines += 1;
                continue;
            }
            if !out.is_empty() {
                out.push_str(&"\n".repeat(newlines.clamp(1, 2)));
            }
            newlines = 1;
            out.push_str(line);
        }
        out
    }
}

fn trim_end_spaces(s: &mut String) {
    let kept = s.trim_end_matches([' ', '\t']).len();
    s.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::html_to_text as t;

    #[test]
    fn blocks_become_lines_and_paragraphs() {
        assert_eq!(
            t(
                "<html><body><h1>Title</h1><p>One\n   two</p><p>Three</p><div>a</div><div>b</div></body></html>"
            ),
            "Title\n\nOne two\n\nThree\n\na\nb"
        );
        assert_eq!(t("a<br>b<br/><br />c"), "a\nb\n\nc");
        assert_eq!(t("<p>x</p><br><p>y</p>"), "x\n\ny");
        assert_eq!(t("<p>a</p>\n\n\n<p></p><p></p>\n<p>b</p>"), "a\n\nb");
        assert_eq!(t("<P CLASS=x>Up</P><Div>case</DIV>"), "Up\n\ncase");
    }

    #[test]
    fn links_show_their_url_unless_it_is_the_text() {
        assert_eq!(
            t(r#"Go <a href="https://x.test/a?b=1&amp;c=2">to the site</a> now"#),
            "Go to the site (https://x.test/a?b=1&c=2) now"
        );
        assert_eq!(
            t(r#"<a href="https://x.test">https://x.test</a>"#),
            "https://x.test"
        );
        assert_eq!(
            t(
                r#"<a href='mailto:hi@x.test'>hi@x.test</a> or <a href="mailto:hi@x.test">write</a>"#
            ),
            "hi@x.test or write (hi@x.test)"
        );
        assert_eq!(t(r##"<a href="#top">Top</a>"##), "Top");
        assert_eq!(
            t(r#"<a href=https://x.test><img src=a.png></a>"#),
            "https://x.test"
        );
        assert_eq!(
            t(r#"<a href="https://x.test"><img alt="Logo" src="l.png"></a>"#),
            "Logo (https://x.test)"
        );
    }

    #[test]
    fn entities_are_decoded() {
        assert_eq!(
            t("Tom &amp; Jerry &lt;3 &eacute;t&eacute; &#8364;5 &#x27;q&#x27; &hellip;"),
            "Tom & Jerry <3 été €5 'q' …"
        );
        assert_eq!(t("a&nbsp;&nbsp;b"), "a b");
        assert_eq!(t("a < b"), "a < b");
    }

    #[test]
    fn scripts_styles_head_and_comments_are_dropped() {
        assert_eq!(
            t(
                "<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style></head>\
               <body><!-- hidden --><script>var a = '<p>';</script><p>Shown</p></body></html>"
            ),
            "Shown"
        );
    }

    #[test]
    fn lists_tables_and_pre() {
        assert_eq!(
            t("<ul><li>a</li><li>b<ol><li>x</li><li>y</li></ol></li></ul><p>after</p>"),
            "- a\n- b\n  1. x\n  2. y\n\nafter"
        );
        assert_eq!(
            t(
                "<table><tr><td>Name</td><td>Ann</td></tr><tr><th>Plan</th><td>Pro</td></tr></table>"
            ),
            "Name Ann\nPlan Pro"
        );
        assert_eq!(t("<pre>a  b\n  c</pre>d"), "a  b\n  c\n\nd");
    }

    #[test]
    fn a_tag_the_input_ends_inside_shows_nothing() {
        assert_eq!(t("before <a href=\"x"), "before");
        assert_eq!(t("a <b"), "a");
        assert_eq!(t("x <img alt='y"), "x");
        // `<` not followed by a name is text.
        assert_eq!(t("1 <2 <"), "1 <2 <");
    }

    #[test]
    fn skipped_elements_end_at_their_end_tag_in_any_case() {
        assert_eq!(t("<STYLE>a</Style >b<script>x</SCRIPT>c"), "bc");
        assert_eq!(t("<style>never closed"), "");
    }

    #[test]
    fn list_indentation_and_link_nesting_are_capped() {
        let deep = format!("{}<li>x", "<ul>".repeat(20));
        assert_eq!(
            t(&deep),
            format!("{}- x", "  ".repeat(super::MAX_INDENT - 1))
        );
        let nested = format!("{}y{}", "<a href=u>".repeat(20), "</a>".repeat(20));
        // Each tracked link shows its URL; the ones beyond the cap are text.
        assert_eq!(
            t(&nested),
            format!("y{}", " (u)".repeat(super::MAX_OPEN_LINKS))
        );
    }

    #[test]
    fn hostile_inputs_take_linear_time() {
        let started = std::time::Instant::now();
        assert_eq!(t(&"<a".repeat(150_000)), "");
        let styles = "<style></style>x".repeat(50_000);
        assert_eq!(t(&styles).len(), 50_000);
        let links = format!(
            "{}{}",
            "<a href=u>".repeat(20),
            "<br>".repeat(50_000) + &"</a>".repeat(20)
        );
        assert_eq!(t(&links), "u");
        let elapsed = started.elapsed();
        // Quadratic versions take minutes on these inputs.
        assert!(elapsed.as_secs() < 5, "{elapsed:?}");
    }

    #[test]
    fn plain_text_passes_through() {
        assert_eq!(t("  just   text \n"), "just text");
        assert_eq!(t(""), "");
    }
}
