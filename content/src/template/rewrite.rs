//! The fallback operator and Plunk's other syntax (keys with spaces, editor entities), rewritten
//! into Handlebars before parsing, with the map that takes columns back to the text as written.

use super::source::{Located, Mustaches, Position, is_symbol_char, top_level, top_level_space};

/// A template rewritten for Handlebars, and where the rewriting changed the length of a line.
pub(super) struct Rewritten {
    pub(super) text: String,
    pub(super) columns: ColumnMap,
}

/// Where the rewriting inserted (positive) or removed (negative) characters: `(line, column in
/// the rewritten text, change)`, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct ColumnMap(Vec<(usize, usize, isize)>);

impl ColumnMap {
    /// The column in the original text of a position in the rewritten text.
    pub(super) fn original_column(&self, line: usize, column: usize) -> usize {
        let mut original = column as isize;
        for &(l, c, change) in &self.0 {
            if l == line && c < column {
                if change > 0 {
                    // A position inside inserted text maps to where it was inserted.
                    original -= change.min((column - c) as isize);
                } else {
                    original -= change;
                }
            }
        }
        original.max(1) as usize
    }
}

/// Text inserted before the first operand of a `??` expression.
const INSERT: &str = "__fallback ";

/// Builds the rewritten text from the source, recording every change of length.
struct Writer<'a> {
    src: &'a str,
    out: Rewritten,
    /// Source bytes copied so far.
    copied: usize,
    /// Position in the source of `copied`.
    pos: Position,
    /// `(line, characters added on it so far)`: edits come in order, so a running sum per line
    /// (not a scan of every earlier edit) keeps the rewriting linear.
    line_change: (usize, isize),
}

impl<'a> Writer<'a> {
    fn new(src: &'a str) -> Writer<'a> {
        Writer {
            src,
            out: Rewritten {
                text: String::with_capacity(src.len() + 16),
                columns: ColumnMap::default(),
            },
            copied: 0,
            pos: Position::default(),
            line_change: (0, 0),
        }
    }

    fn copy_to(&mut self, to: usize) {
        let chunk = &self.src[self.copied..to];
        self.out.text.push_str(chunk);
        self.pos.advance(chunk);
        self.copied = to;
    }

    /// Replaces `src[from..to]` (on one line) by `text`.
    fn replace(&mut self, from: usize, to: usize, text: &str) {
        self.copy_to(from);
        let change = text.chars().count() as isize - self.src[from..to].chars().count() as isize;
        if change != 0 {
            if self.line_change.0 != self.pos.line {
                self.line_change = (self.pos.line, 0);
            }
            let column = (self.pos.column as isize + self.line_change.1) as usize;
            self.out.columns.0.push((self.pos.line, column, change));
            self.line_change.1 += change;
        }
        self.out.text.push_str(text);
        self.pos.advance(&self.src[from..to]);
        self.copied = to;
    }

    fn finish(mut self) -> Rewritten {
        self.copy_to(self.src.len());
        self.out
    }
}

/// The entities a rich-text editor leaves inside `{{ }}`, decoded there.
const ENTITIES: [(&str, &str); 8] = [
    ("&quot;", "\""),
    ("&#34;", "\""),
    ("&#39;", "'"),
    ("&apos;", "'"),
    ("&gt;", ">"),
    ("&lt;", "<"),
    ("&nbsp;", " "),
    ("&amp;", "&"),
];

/// Helpers a value expression may call; a first word that is none of them, followed by more
/// words, is a key with spaces (`{{first name}}`).
const VALUE_HELPERS: [&str; 13] = [
    "eq", "ne", "gt", "lt", "gte", "lte", "and", "or", "not", "len", "lookup", "else", "this",
];

/// Rewrites the template language into Handlebars, in one pass over the mustaches, keeping
/// lines where they are (columns map back through [`ColumnMap::original_column`]):
///
/// - entities a rich-text editor leaves inside `{{ }}` (`&quot;`, `&gt;`, `&nbsp;`…) are decoded;
/// - `{{a ?? b ?? fallback}}` becomes `{{__fallback a  b  "fallback"}}`: each `??` becomes two
///   spaces, the helper name is inserted before the first operand, and the last operand is
///   literal text, quoted or not (`{{plan ?? free}}` renders `free`, as Plunk does); the
///   operands before it are values;
/// - `{{first name}}` (words that are not a helper call) becomes `{{[first name]}}`, one key.
///
/// Comments, raw blocks and escaped mustaches (`\{{`) are left alone.
pub(super) fn rewrite_template(src: &str) -> Result<Rewritten, Located> {
    if !src.contains("{{") {
        let mut w = Writer::new(src);
        w.copy_to(src.len());
        return Ok(w.out);
    }
    let mut w = Writer::new(src);
    for m in Mustaches::new(src) {
        let body = &src[m.body_start..m.body_end];
        // Entities first, so that what follows sees the quotes and operators they stand for.
        let decoded;
        let (body_src, offset_map): (&str, Option<Vec<usize>>) = if body.contains('&') {
            let (text, map) = decode_entities(body);
            decoded = text;
            (&decoded, Some(map))
        } else {
            (body, None)
        };
        let trimmed = body_src.trim_start();
        let value_expression = !(trimmed.starts_with(['#', '/', '^', '>', '!', '*', '&'])
            || trimmed.starts_with("else")
                && trimmed[4..]
                    .chars()
                    .next()
                    .is_none_or(|c| !is_symbol_char(c)));
        let operators = operators_in(body_src);
        let words = if operators.is_empty() && value_expression {
            key_with_spaces(body_src)
        } else {
            None
        };
        if operators.is_empty() && words.is_none() && offset_map.is_none() {
            continue;
        }
        // Where a byte of the decoded body came from in the source.
        let source_at =
            |i: usize| -> usize { m.body_start + offset_map.as_ref().map_or(i, |map| map[i]) };
        if !operators.is_empty() && !value_expression {
            let at = w.pos_of(source_at(operators[0]));
            return Err(at.located(
                "`??` works only in a value expression, `{{name ?? \"fallback\"}}` or \
                 `{{{name ?? \"fallback\"}}}`, not in blocks, partials or `{{& }}`"
                    .into(),
            ));
        }
        let mut text = String::with_capacity(body_src.len() + 16);
        if !operators.is_empty() {
            let mut starts = vec![0];
            starts.extend(operators.iter().map(|o| o + 2));
            let mut ends: Vec<usize> = operators.clone();
            ends.push(body_src.len());
            let last = starts.len() - 1;
            let lead = body_src.len() - trimmed.len();
            text.push_str(&body_src[..lead]);
            text.push_str(INSERT);
            for (k, (&s, &e)) in starts.iter().zip(&ends).enumerate() {
                let operand = &body_src[s..e];
                let value = operand.trim();
                if value.is_empty() {
                    let (anchor, message) = if k == 0 {
                        (
                            operators[0],
                            "`??` needs a value before it, as in `{{name ?? \"there\"}}`",
                        )
                    } else {
                        (
                            operators[k - 1],
                            "`??` needs a fallback after it, as in `{{name ?? there}}`",
                        )
                    };
                    return Err(w.pos_of(source_at(anchor)).located(message.into()));
                }
                let pad_start = operand.len() - operand.trim_start().len();
                let pad_end = operand.len() - operand.trim_end().len();
                if k > 0 {
                    text.push_str("  ");
                }
                if k == last && k > 0 && is_bare_text(value) {
                    text.push_str(&operand[..pad_start]);
                    text.push_str(&quote_literal(value).ok_or_else(|| {
                        w.pos_of(source_at(s + pad_start)).located(
                            "a fallback holding both `\"` and `'` must be quoted, as in \
                             `{{name ?? \"it's \\\"here\\\"\"}}`"
                                .into(),
                        )
                    })?);
                    text.push_str(&operand[operand.len() - pad_end..]);
                } else if let Some((a, b)) = key_with_spaces(value) {
                    // `{{first name ?? there}}`: a key with spaces before the fallback.
                    if k > 0 {
                        text.push_str(&operand[..pad_start]);
                    }
                    text.push('[');
                    text.push_str(&value[a..b]);
                    text.push(']');
                    text.push_str(&operand[operand.len() - pad_end..]);
                } else {
                    if let Some(gap) = top_level_space(value) {
                        let at = w.pos_of(source_at(s + pad_start + gap));
                        return Err(at.located(
                            "each value before the last `??` must be one path, quoted string or \
                             number; put a helper call in parentheses, as in \
                             `{{(lookup items 0) ?? \"none\"}}`"
                                .into(),
                        ));
                    }
                    text.push_str(if k == 0 {
                        operand.trim_start()
                    } else {
                        operand
                    });
                }
            }
        } else if let Some((first, end)) = words {
            text.push_str(&body_src[..first]);
            text.push('[');
            text.push_str(&body_src[first..end]);
            text.push(']');
            text.push_str(&body_src[end..]);
        } else {
            text.push_str(body_src);
        }
        w.replace_mustache_body(m.body_start, m.body_end, &text);
    }
    Ok(w.finish())
}

impl Writer<'_> {
    /// The position in the source of byte `at` (at or after what was copied).
    fn pos_of(&self, at: usize) -> Position {
        self.pos.after(&self.src[self.copied..at])
    }

    /// Replaces a mustache's body, line by line, so each line's change of length is recorded
    /// where it happens (bodies may span lines; each edit above stays on its line).
    fn replace_mustache_body(&mut self, start: usize, end: usize, text: &str) {
        let original = &self.src[start..end];
        if !original.contains('\n') {
            self.replace(start, end, text);
            return;
        }
        // Multi-line bodies: the rewriting only ever inserts or decodes on a line, never across
        // one, so the lines correspond one to one.
        let mut from = start;
        let mut new_lines = text.split('\n');
        for old_line in original.split('\n') {
            let to = from + old_line.len();
            let replacement = new_lines.next().unwrap_or("");
            self.replace(from, to, replacement);
            if to < end {
                self.copy_to(to + 1);
            }
            from = to + 1;
        }
    }
}

/// `body` with the [`ENTITIES`] decoded, and for each byte of the result the offset in `body` of
/// the byte it came from.
fn decode_entities(body: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(body.len());
    let mut map = Vec::with_capacity(body.len() + 1);
    let mut i = 0;
    while i < body.len() {
        let rest = &body[i..];
        if let Some((entity, text)) = ENTITIES.iter().find(|(e, _)| rest.starts_with(e)) {
            out.push_str(text);
            map.extend(std::iter::repeat_n(i, text.len()));
            i += entity.len();
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            map.extend(std::iter::repeat_n(i, c.len_utf8()));
            i += c.len_utf8();
        }
    }
    map.push(body.len());
    (out, map)
}

/// Byte offsets of the `??` operators of a body, outside quotes, parentheses and brackets.
fn operators_in(body: &str) -> Vec<usize> {
    let mut found: Vec<usize> = Vec::new();
    for (p, b) in top_level(body, 0, body.len()) {
        let pair = b == b'?' && body.as_bytes().get(p + 1) == Some(&b'?');
        if pair && found.last().is_none_or(|&last| last + 1 != p) {
            found.push(p);
        }
    }
    found
}

/// Whether a last `??` operand is bare text to render as written: not quoted, not a
/// subexpression or bracketed segment, not a number or a Handlebars literal.
fn is_bare_text(value: &str) -> bool {
    !(value.starts_with(['"', '\'', '(', '['])
        || value.parse::<f64>().is_ok()
        || matches!(value, "true" | "false" | "null" | "undefined"))
}

/// `text` as a Handlebars string literal, or `None` when it holds both kinds of quote.
fn quote_literal(text: &str) -> Option<String> {
    if !text.contains('"') {
        Some(format!("\"{text}\""))
    } else if !text.contains('\'') {
        Some(format!("'{text}'"))
    } else {
        None
    }
}

/// `(start, end)` of the words of `{{first name}}`: two or more plain words, the first of which
/// calls no helper. `None` for anything else.
fn key_with_spaces(body: &str) -> Option<(usize, usize)> {
    let trimmed = body.trim();
    let first = body.len() - body.trim_start().len();
    let words: Vec<&str> = trimmed.split_whitespace().collect();
    let plain = |w: &str| {
        w.starts_with(|c: char| c.is_alphabetic() || c == '_')
            && w.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-'))
    };
    (words.len() >= 2 && words.iter().all(|w| plain(w)) && !VALUE_HELPERS.contains(&words[0]))
        .then_some((first, first + trimmed.len()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{body_error, render};
    use super::super::{CompiledTemplate, MAX_EXPRESSIONS};
    use super::*;

    #[test]
    fn fallback_is_literal_text_quoted_or_not_and_values_come_before_it() {
        let vars = json!({ "first": "Ann", "empty": "", "nothing": null });
        assert_eq!(render("{{nick ?? \"friend\"}}", &vars), "friend");
        assert_eq!(render("{{nick ?? 'friend'}}", &vars), "friend");
        assert_eq!(render("{{count ?? 0}}", &vars), "0");
        assert_eq!(render("{{count ?? -1.5}}", &vars), "-1.5");
        // As in Plunk, the last operand is text, whatever it looks like.
        assert_eq!(render("{{nick ?? first}}", &vars), "first");
        assert_eq!(render("{{plan ?? free}}", &vars), "free");
        assert_eq!(
            render("Hi {{name ?? friend}} there", &vars),
            "Hi friend there"
        );
        assert_eq!(render("{{name ?? dear friend}}", &vars), "dear friend");
        // Values come before it: a chain falls through to the text.
        assert_eq!(render("{{nick ?? first ?? there}}", &vars), "Ann");
        assert_eq!(render("{{nick ?? empty ?? nothing ?? \"x\"}}", &vars), "x");
        assert_eq!(render("{{nickname ?? firstName ?? there}}", &vars), "there");
        // A present value wins.
        assert_eq!(render("{{first ?? \"friend\"}}", &vars), "Ann");
    }

    #[test]
    fn keys_with_spaces_and_editor_entities_render_as_in_plunk() {
        let vars = json!({ "first name": "Ann", "n": 2 });
        assert_eq!(render("{{first name}}", &vars), "Ann");
        assert_eq!(render("{{ first name ?? there }}", &vars), "Ann");
        assert_eq!(render("{{last name ?? there}}", &vars), "there");
        // What a rich-text editor leaves inside the braces.
        assert_eq!(render("{{name ?? &quot;friend&quot;}}", &vars), "friend");
        assert_eq!(render("{{name&nbsp;??&nbsp;friend}}", &vars), "friend");
        assert_eq!(render("{{#if (gt n 1)}}many{{/if}}", &vars), "many");
        assert_eq!(render("{{name ?? &lt;none&gt;}}", &vars), "&lt;none&gt;");
        // Entities outside the braces are the HTML's own.
        assert_eq!(
            render("&quot;{{first name}}&quot;", &vars),
            "&quot;Ann&quot;"
        );
    }

    #[test]
    fn fallback_applies_to_missing_null_and_empty_but_not_to_zero_or_false() {
        let vars = json!({ "null": null, "empty": "", "zero": 0, "no": false, "space": " " });
        let t = "[{{absent ?? 'd'}}][{{null ?? 'd'}}][{{empty ?? 'd'}}][{{zero ?? 'd'}}]\
                 [{{no ?? 'd'}}][{{space ?? 'd'}}]";
        assert_eq!(render(t, &vars), "[d][d][d][0][false][ ]");
    }

    #[test]
    fn fallback_accepts_whitespace_variations_and_nested_paths() {
        let vars = json!({ "profile": { "tier": "" } });
        for t in [
            "{{profile.tier ?? \"free\"}}",
            "{{profile.tier??\"free\"}}",
            "{{  profile.tier   ??   \"free\"  }}",
            "{{\tprofile.tier\n??\n'free'}}",
            "{{~ profile.tier ?? \"free\" ~}}",
        ] {
            assert_eq!(render(t, &vars), "free", "{t}");
        }
    }

    #[test]
    fn positions_after_a_fallback_refer_to_the_original_text() {
        // The rewrite inserts text before `a`; the error after it must still point at `{{/x}}`
        // in the original line.
        let e = body_error("{{a ?? 'b'}} {{#if c}}{{/x}}");
        assert_eq!(e.line, Some(1));
        let original_col = "{{a ?? 'b'}} {{#if c}}".chars().count() + 1;
        assert!(
            e.column.unwrap() <= original_col,
            "column {:?} is beyond the original text",
            e.column
        );
        let e = body_error("x\n{{a ?? 'b'}} {{nope 1}}");
        assert_eq!((e.line, e.column), (Some(2), Some(14)), "{e}");
    }

    #[test]
    fn misuses_of_the_operator_are_errors_at_their_position() {
        let e = body_error("ab\ncd {{name ?? }}");
        assert_eq!((e.line, e.column), (Some(2), Some(11)), "{e}");
        assert!(e.message.contains("fallback after it"), "{e}");

        let e = body_error("{{ ?? 'x'}}");
        assert_eq!((e.line, e.column), (Some(1), Some(4)), "{e}");
        assert!(e.message.contains("value before it"), "{e}");

        let e = body_error("{{lookup a 0 ?? 'x'}}");
        assert_eq!((e.line, e.column), (Some(1), Some(9)), "{e}");
        assert!(e.message.contains("parentheses"), "{e}");

        let e = body_error("{{#if a ?? b}}x{{/if}}");
        assert!(e.message.contains("value expression"), "{e}");
        assert_eq!((e.line, e.column), (Some(1), Some(9)), "{e}");

        // A helper call in parentheses is one operand.
        assert_eq!(render("{{(lookup a 0) ?? 'x'}}", &json!({ "a": [] })), "x");
    }

    #[test]
    fn many_fallbacks_rewrite_in_linear_time_and_too_many_expressions_are_refused() {
        let started = std::time::Instant::now();
        let rewritten = rewrite_template(&"{{a ?? b}}".repeat(60_000)).ok().unwrap();
        assert_eq!(rewritten.columns.0.len(), 60_000);
        // Columns of the rewritten text: each earlier insertion on the line shifts it. Each
        // `{{a ?? b}}` gains the helper's name and the quotes of its literal fallback.
        let added = INSERT.len() + 2;
        assert_eq!(
            rewritten.columns.0[59_999],
            (1, 59_999 * (10 + added) + 3, added as isize)
        );
        // 60,000 are over the size limit; 5,000 over the expression limit.
        assert_eq!(body_error(&"{{a ?? b}}".repeat(60_000)).line, None);
        let e = body_error(&"{{a ?? b}}".repeat(5_000));
        assert_eq!((e.line, e.column), (Some(1), Some(20_003)), "{e}");
        assert!(e.message.contains("more than 2000 expressions"), "{e}");
        // As many as allowed compile, and positions after them still refer to the source.
        let most = "{{a ?? b}}".repeat(MAX_EXPRESSIONS - 1);
        let t = CompiledTemplate::compile("s", &most).unwrap();
        assert_eq!(t.render(&json!({ "b": "y" })).unwrap().html.len(), 1_999);
        let e = body_error(&format!("{most}\n{{{{a ?? b}}}} {{{{}}}}"));
        assert_eq!((e.line, e.column), (Some(2), Some(14)), "{e}");
        assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
    }
}
