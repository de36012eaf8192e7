//! Walking a template's source: its mustaches (`{{ … }}`) in order, positions as line and
//! column, and the bytes of an expression outside quotes, parentheses and brackets.

/// A problem found at a position of the template.
pub(super) struct Located {
    pub(super) line: usize,
    pub(super) column: usize,
    pub(super) message: String,
}

/// The mustaches of a source, in order: escaped ones (`\\{{`), comments and raw blocks are
/// skipped; the walk stops at the first one not closed (the parser reports it). Each byte of
/// the source is read a bounded number of times.
pub(super) struct Mustaches<'a> {
    src: &'a str,
    /// Where the search for the next `{{` starts.
    at: usize,
}

impl<'a> Mustaches<'a> {
    pub(super) fn new(src: &'a str) -> Mustaches<'a> {
        Mustaches { src, at: 0 }
    }
}

impl Iterator for Mustaches<'_> {
    type Item = Mustache;

    fn next(&mut self) -> Option<Mustache> {
        let src = self.src;
        let bytes = src.as_bytes();
        while let Some(found) = src.get(self.at..)?.find("{{") {
            let open = self.at + found;
            let backslashes = bytes[..open]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if backslashes == 1 {
                self.at = open + 2;
                continue;
            }
            let rest = &src[open..];
            let skipped = if rest.starts_with("{{{{") {
                // A raw block, through its closing `{{{{/name}}}}`.
                Some(
                    rest.find("{{{{/")
                        .and_then(|c| rest[c..].find("}}}}").map(|e| c + e + 4)),
                )
            } else if rest.starts_with("{{!--") {
                Some(rest.find("--}}").map(|e| e + 4))
            } else if rest.starts_with("{{!") {
                Some(rest.find("}}").map(|e| e + 2))
            } else {
                None
            };
            if let Some(len) = skipped {
                self.at = len.map_or(src.len(), |n| open + n);
                continue;
            }
            let Some(m) = Mustache::parse(src, open) else {
                self.at = src.len();
                return None;
            };
            self.at = m.end;
            return Some(m);
        }
        None
    }
}

/// Line and column (1-based, in characters) while walking the source.
#[derive(Clone, Copy)]
pub(super) struct Position {
    pub(super) line: usize,
    pub(super) column: usize,
}

impl Default for Position {
    fn default() -> Position {
        Position { line: 1, column: 1 }
    }
}

impl Position {
    pub(super) fn advance(&mut self, text: &str) {
        for c in text.chars() {
            if c == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
        }
    }

    pub(super) fn after(self, text: &str) -> Position {
        let mut p = self;
        p.advance(text);
        p
    }

    pub(super) fn located(self, message: String) -> Located {
        Located {
            line: self.line,
            column: self.column,
            message,
        }
    }
}

/// One `{{ … }}` or `{{{ … }}}` of the source (byte offsets).
pub(super) struct Mustache {
    /// Start of the expression, after `{{`, `~` and `{`.
    pub(super) body_start: usize,
    /// End of the expression, before the closing `~`, `}` and `}}`.
    pub(super) body_end: usize,
    /// After the closing braces.
    end: usize,
}

impl Mustache {
    /// The mustache opening at `open`, or `None` when it is not closed.
    fn parse(src: &str, open: usize) -> Option<Mustache> {
        let bytes = src.as_bytes();
        let mut p = open + 2;
        if bytes.get(p) == Some(&b'~') {
            p += 1;
        }
        let triple = bytes.get(p) == Some(&b'{');
        if triple {
            p += 1;
            if bytes.get(p) == Some(&b'~') {
                p += 1;
            }
        }
        let body_start = p;
        let closers: &[&str] = if triple {
            &["~}}}", "}}}", "}~}}"]
        } else {
            &["~}}", "}}"]
        };
        top_level(src, body_start, src.len())
            .filter(|&(_, b)| b == b'~' || b == b'}')
            .find_map(|(p, _)| {
                let close = closers.iter().find(|c| src[p..].starts_with(**c))?;
                Some(Mustache {
                    body_start,
                    body_end: p,
                    end: p + close.len(),
                })
            })
    }
}

/// The byte offset of the first whitespace outside quotes, parentheses and brackets.
pub(super) fn top_level_space(operand: &str) -> Option<usize> {
    top_level(operand, 0, operand.len())
        .find(|(_, b)| b.is_ascii_whitespace())
        .map(|(p, _)| p)
}

/// The bytes of `src[from..to]` outside quoted strings, parentheses (subexpressions) and
/// brackets (path segments such as `[first name]`), with their offsets.
pub(super) fn top_level(
    src: &str,
    from: usize,
    to: usize,
) -> impl Iterator<Item = (usize, u8)> + '_ {
    let bytes = src.as_bytes();
    let mut quote = None;
    let mut escaped = false;
    let mut in_brackets = false;
    let mut depth = 0usize;
    (from..to).filter_map(move |p| {
        let b = bytes[p];
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == q {
                quote = None;
            }
            return None;
        }
        if in_brackets {
            in_brackets = b != b']';
            return None;
        }
        match b {
            b'"' | b'\'' => quote = Some(b),
            b'[' => in_brackets = true,
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => return Some((p, b)),
            _ => {}
        }
        None
    })
}

/// Characters of a Handlebars identifier (the `handlebars` grammar's `symbol_char`).
pub(super) fn is_symbol_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '$' | ':') || !c.is_ascii()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::render;

    #[test]
    fn fallback_text_keeps_question_marks_and_braces_in_quotes() {
        let vars = json!({});
        assert_eq!(render("{{a ?? \"why?? }}\"}}", &vars), "why?? }}");
        // `??` outside mustaches is text.
        assert_eq!(render("What?? {{a ?? 'x'}}", &vars), "What?? x");
        // Comments and escaped mustaches are left alone.
        assert_eq!(render("{{!-- a ?? b --}}{{! c ?? d }}ok", &vars), "ok");
        assert_eq!(render("\\{{a ?? b}}", &vars), "{{a ?? b}}");
        // Brackets and parentheses hide `??`, quotes and braces.
        assert_eq!(
            render("{{[it's ?? }}] ?? 'x'}}", &json!({ "it's ?? }}": "y" })),
            "y"
        );
        assert_eq!(render("{{[it's ?? }}] ?? 'x'}}", &vars), "x");
    }
}
