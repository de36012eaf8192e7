//! Compiling a subject or body: the checks made before parsing (size, expressions, nesting),
//! the rewriting of Herald's syntax into Handlebars, the parse, readable syntax errors at their
//! position in the text as written, and the refusal of helpers Herald does not offer.

use handlebars::Template;
use handlebars::template::{Parameter, TemplateElement};

use super::rewrite::rewrite_template;
use super::source::{Located, Mustaches, Position};
use super::{FALLBACK_HELPER, MAX_EXPRESSIONS, MAX_NESTING, MAX_SOURCE_BYTES, Part, TemplateError};

/// Helpers a template may call (the `handlebars` built-ins but `log`, and the fallback).
const HELPERS: [&str; 17] = [
    "if",
    "unless",
    "each",
    "with",
    "raw",
    "lookup",
    "eq",
    "ne",
    "gt",
    "gte",
    "lt",
    "lte",
    "and",
    "or",
    "not",
    "len",
    FALLBACK_HELPER,
];

pub(super) fn compile_one(field: &'static str, source: &str) -> Result<Part, TemplateError> {
    let at = |line: usize, column: usize, message: String| TemplateError {
        field,
        line: Some(line),
        column: Some(column),
        message,
    };
    check_shape(source).map_err(|e| TemplateError { field, ..e })?;
    let rewritten = rewrite_template(source).map_err(|e| at(e.line, e.column, e.message))?;
    let template = Template::compile(&rewritten.text).map_err(|e| match e.pos() {
        Some((line, column)) => {
            let found = syntax_error(&rewritten.text, e.reason(), line, column);
            let column = rewritten.columns.original_column(found.line, found.column);
            at(found.line, column, found.message)
        }
        None => TemplateError {
            field,
            line: None,
            column: None,
            message: e.reason().to_string(),
        },
    })?;
    check_elements(&template).map_err(|e| {
        let column = rewritten.columns.original_column(e.line, e.column);
        at(e.line, column, e.message)
    })?;
    Ok(Part {
        template,
        columns: rewritten.columns,
    })
}

/// A readable account of a parse error of the `handlebars` crate at `line`:`column` of `text`.
fn syntax_error(
    text: &str,
    reason: &handlebars::TemplateErrorReason,
    line: usize,
    column: usize,
) -> Located {
    use handlebars::TemplateErrorReason as R;
    let here = Position { line, column };
    let message = match reason {
        R::MismatchingClosedHelper(open, close) => {
            format!("the block `{{{{#{open}}}}}` is closed by `{{{{/{close}}}}}`")
        }
        R::InvalidSyntax(_) => {
            let offset = byte_offset(text, line, column);
            let rest = &text[offset..];
            let last_open = text[..offset].rfind("{{");
            if let Some(open) = last_open.filter(|&o| !text[o..].contains("}}")) {
                return Position::default()
                    .after(&text[..open])
                    .located("this `{{` is not closed by `}}`".into());
            }
            if rest.trim().is_empty() {
                "the template ends inside a block: close every `{{#name …}}` with `{{/name}}`"
                    .to_string()
            } else {
                let mut snippet: String =
                    rest.chars().take_while(|&c| c != '\n').take(20).collect();
                if let Some(close) = snippet.find("}}") {
                    snippet.truncate(close + 2);
                }
                format!(
                    "unexpected `{snippet}`: an expression holds a name, a path such as \
                     `profile.tier`, or a helper and its arguments, and is closed by `}}}}`"
                )
            }
        }
        other => other.to_string(),
    };
    here.located(message)
}

/// The byte offset of a 1-based line and column (in characters).
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let line_text = &text[line_start.min(text.len())..];
    line_start
        + line_text
            .char_indices()
            .nth(column.saturating_sub(1))
            .map_or(line_text.len(), |(i, _)| i)
}

/// Rejects helpers Herald does not offer, partials and decorators.
fn check_elements(template: &Template) -> Result<(), Located> {
    for (i, element) in template.elements.iter().enumerate() {
        let (line, column) = template.mapping.get(i).map_or((1, 1), |m| (m.0, m.1));
        let fail = |message: String| Located {
            line,
            column,
            message,
        };
        match element {
            TemplateElement::Expression(h)
            | TemplateElement::HtmlExpression(h)
            | TemplateElement::HelperBlock(h) => {
                let name = h.name.as_name().unwrap_or_default();
                let call = h.block || !h.params.is_empty() || !h.hash.is_empty();
                if call {
                    check_helper(name).map_err(fail)?;
                } else if HELPERS.contains(&name) {
                    return Err(fail(format!(
                        "`{name}` is a helper and needs arguments, as in `{{{{#{name} value}}}}`"
                    )));
                }
                for p in h.params.iter().chain(h.hash.values()) {
                    check_parameter(p).map_err(fail)?;
                }
                for inner in [&h.template, &h.inverse].into_iter().flatten() {
                    check_elements(inner)?;
                }
            }
            TemplateElement::PartialExpression(_) | TemplateElement::PartialBlock(_) => {
                return Err(fail("partials (`{{> name}}`) are not supported".into()));
            }
            TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => {
                return Err(fail("decorators (`{{* name}}`) are not supported".into()));
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_parameter(p: &Parameter) -> Result<(), String> {
    if let Parameter::Subexpression(sub) = p {
        if sub.is_helper() {
            check_helper(sub.name())?;
        }
        for inner in sub.params().into_iter().flatten() {
            check_parameter(inner)?;
        }
        for inner in sub.hash().into_iter().flat_map(|h| h.values()) {
            check_parameter(inner)?;
        }
    }
    Ok(())
}

fn check_helper(name: &str) -> Result<(), String> {
    if HELPERS.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "unknown helper `{name}`; the helpers are {}",
            HELPERS[..HELPERS.len() - 1].join(", ")
        ))
    }
}

/// The checks made before parsing: the size of the source, and how deep its blocks and
/// subexpressions nest (the parser and the renderer recurse once per level).
fn check_shape(src: &str) -> Result<(), TemplateError> {
    if src.len() > MAX_SOURCE_BYTES {
        return Err(TemplateError {
            field: "",
            line: None,
            column: None,
            message: format!(
                "the template is {} bytes; at most {MAX_SOURCE_BYTES} (512 KB) are accepted: \
                 move large content out of the template",
                src.len()
            ),
        });
    }
    let too_deep = |at: usize, what: &str| {
        let p = Position::default().after(&src[..at]);
        TemplateError {
            field: "",
            line: Some(p.line),
            column: Some(p.column),
            message: format!("{what} nest more than {MAX_NESTING} deep here; flatten the template"),
        }
    };
    let mut depth = 0usize;
    for (n, m) in Mustaches::new(src).enumerate() {
        if n == MAX_EXPRESSIONS {
            let p = Position::default().after(&src[..m.body_start]);
            return Err(TemplateError {
                field: "",
                line: Some(p.line),
                column: Some(p.column),
                message: format!(
                    "the template has more than {MAX_EXPRESSIONS} expressions (`{{{{…}}}}`); \
                     use fewer, for example a loop (`{{{{#each}}}}`) over a list"
                ),
            });
        }
        let body = &src[m.body_start..m.body_end];
        match body.trim_start().as_bytes().first() {
            Some(b'#') => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(too_deep(m.body_start, "blocks (`{{#…}}`)"));
                }
            }
            Some(b'/') => depth = depth.saturating_sub(1),
            _ => {}
        }
        let mut parens = 0usize;
        let mut quote = None;
        for (k, b) in body.bytes().enumerate() {
            match (quote, b) {
                (Some(q), _) if b == q => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') => quote = Some(b),
                (None, b'(') => {
                    parens += 1;
                    if parens > MAX_NESTING {
                        return Err(too_deep(m.body_start + k, "subexpressions (`( … )`)"));
                    }
                }
                (None, b')') => parens = parens.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{body_error, render};
    use super::super::{CompiledTemplate, MAX_NESTING, MAX_SOURCE_BYTES};

    #[test]
    fn parse_errors_carry_field_line_and_column() {
        let e = body_error("<p>\n  Hello {{name</p>");
        assert_eq!(e.field, "body");
        assert_eq!((e.line, e.column), (Some(2), Some(9)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "line 2, column 9: this `{{` is not closed by `}}`"
        );

        let e = body_error("<p>\n{{#if vip}}\nhi");
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("ends inside a block"), "{e}");

        let e = body_error("a {{}} b");
        assert_eq!((e.line, e.column), (Some(1), Some(5)), "{e}");
        assert!(e.message.starts_with("unexpected `}}`"), "{e}");
        // Columns count characters, not bytes.
        let e = body_error("é ü {{}}");
        assert_eq!(e.column, Some(7), "{e}");
        let e = body_error("é {{a ?? 'ü'}} {{}}");
        assert_eq!(e.column, Some(18), "{e}");

        let e = body_error("line one\n{{#if a}}x{{/each}}");
        assert_eq!((e.line, e.field), (Some(2), "body"));
        assert!(e.message.contains("closed by"), "{e}");

        let e = CompiledTemplate::compile("Hi {{#if}}", "ok").unwrap_err();
        assert_eq!(e.field, "subject");
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn unknown_helpers_partials_and_decorators_are_rejected_at_compile_time() {
        // Bare words are a key with spaces (`{{first name}}`); a call with a literal is a call.
        let e = body_error("ok\n  {{shout \"name\"}}");
        assert_eq!((e.line, e.column), (Some(2), Some(3)), "{e}");
        assert!(e.message.contains("unknown helper `shout`"), "{e}");
        assert!(
            body_error("{{#if (shout a)}}x{{/if}}")
                .message
                .contains("shout")
        );
        assert!(body_error("{{log 'a'}}").message.contains("unknown helper"));
        assert!(body_error("{{> footer}}").message.contains("partials"));
        assert!(body_error("{{*inline}}").message.contains("decorators"));
        assert!(body_error("{{if}}").message.contains("needs arguments"));
    }

    #[test]
    fn deep_nesting_and_large_sources_are_refused_before_parsing() {
        let deep = |n| format!("{}x{}", "{{#if a}}".repeat(n), "{{/if}}".repeat(n));
        // 50,000 levels are over the size limit too.
        assert_eq!(body_error(&deep(50_000)).line, None);
        let e = body_error(&deep(1_000));
        assert_eq!(e.field, "body");
        assert_eq!(
            (e.line, e.column),
            (Some(1), Some(9 * MAX_NESTING + 3)),
            "{e}"
        );
        assert!(e.message.contains("nest more than 100 deep"), "{e}");
        // As deep as allowed is fine.
        assert_eq!(render(&deep(MAX_NESTING), &json!({ "a": true })), "x");
        let parens = format!("{{{{eq {}a{} 1}}}}", "(eq ".repeat(200), " 1)".repeat(200));
        assert!(body_error(&parens).message.contains("subexpressions"));
        // Unclosed, deep parentheses reach the parser, which refuses them without crashing.
        assert!(
            body_error(&format!("{{{{a {}", "(".repeat(50_000)))
                .line
                .is_some()
        );
        let e = CompiledTemplate::compile(&"s".repeat(MAX_SOURCE_BYTES + 1), "b").unwrap_err();
        assert_eq!((e.field, e.line), ("subject", None));
        assert!(e.message.contains("at most 524288"), "{e}");
    }
}
