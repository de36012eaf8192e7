//! The template renderer: Handlebars (`handlebars` crate) with Herald's fallback operator, no I/O.
//!
//! A template is a subject and an HTML body. [`CompiledTemplate::compile`] parses both once;
//! [`CompiledTemplate::render`] fills them with one recipient's variables as many times as needed
//! (no parsing per render), and derives the plain-text alternative from the rendered HTML.
//!
//! The rules (also in `docs/decisions.md`, section "Templates"):
//!
//! - `{{name}}` and dotted paths `{{profile.tier}}` render a variable; a missing or null value
//!   renders nothing.
//! - `{{name ?? fallback}}` renders the fallback when `name` is missing, null or the empty string.
//!   As in Plunk, the fallback (the last operand) is text, quoted or bare (`{{plan ?? free}}`
//!   renders `free`), or a number; the operands before it are values, so a chain falls through
//!   variables to the text (`{{nickname ?? firstName ?? there}}`). The operator works in `{{ }}`
//!   and `{{{ }}}`, with any whitespace around `??`.
//! - Also as in Plunk: `{{first name}}` (bare words, no helper) is one key with a space, and the
//!   entities a rich-text editor leaves inside the braces (`&quot;`, `&gt;`, `&nbsp;`…) are
//!   decoded. All of this is a rewriting into Handlebars before parsing (the fallback becomes a
//!   call of the internal helper `__fallback`), keeping line numbers and reporting columns of the
//!   original text.
//! - In the body, `{{ }}` escapes HTML (`&`, `<`, `>`, `"`, `'`, the backtick and `=`) and
//!   `{{{ }}}` inserts the value raw.
//!   The subject is plain text: nothing is escaped, and line breaks in the rendered subject
//!   become single spaces.
//! - The block helpers `if`, `unless`, `each`, `with`, `raw` and the helpers `lookup`, `eq`,
//!   `ne`, `gt`, `gte`, `lt`, `lte`, `and`, `or`, `not`, `len` are available; any other helper,
//!   partials and decorators are errors at compile time, with their position.
//! - The text alternative: see [`html_to_text`].
//! - Limits, so that one request's template cannot take unbounded time or memory: a subject or
//!   body of at most [`MAX_SOURCE_BYTES`] and [`MAX_EXPRESSIONS`] expressions, with blocks and
//!   subexpressions nested at most [`MAX_NESTING`] deep (checked before parsing); while rendering, at most
//!   [`MAX_RENDERED_BYTES`] of output and [`MAX_RENDER_STEPS`] steps of `{{#each}}` work per
//!   message. Each is a [`TemplateError`] naming the field, never a crash. Compiling and
//!   rendering take time linear in the source and the output.
//!
//! The rules of a stored template's other fields (name, type, subject length, sender name) are
//! in [`fields`].

mod compile;
pub mod fields;
mod render;
mod rewrite;
mod source;
mod text;

use handlebars::{Context, Template};
use serde_json::Value;

use compile::compile_one;
use render::{HTML, PLAIN, STEPS_LEFT, one_line, render_one};
use rewrite::ColumnMap;
pub use text::html_to_text;

/// Largest subject or body source accepted, in bytes (checked before parsing).
pub const MAX_SOURCE_BYTES: usize = 512 * 1024;
/// Most expressions (`{{…}}`, blocks included) in a subject or body. The `handlebars` parser
/// finds each element's line by reading the source from its start, so parsing takes time
/// proportional to the elements times the size: the two caps bound it.
pub const MAX_EXPRESSIONS: usize = 2_000;
/// Deepest nesting of blocks (`{{#if}}…{{/if}}`) and of subexpressions (`(eq a b)`).
pub const MAX_NESTING: usize = 100;
/// Most rendered output per message, subject and body together: the message size limit.
pub const MAX_RENDERED_BYTES: usize = 40 * 1024 * 1024;
/// Most `{{#each}}` work per message: each iteration costs one step plus one per element of the
/// block it renders (counted with nested blocks), and each call one step.
pub const MAX_RENDER_STEPS: u64 = 2_000_000;

/// The internal helper the fallback operator is rewritten into.
const FALLBACK_HELPER: &str = "__fallback";

/// A template that does not compile or render.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct TemplateError {
    /// `subject` or `body`.
    pub field: &'static str,
    /// 1-based line of the problem, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters) of the problem, when known.
    pub column: Option<usize>,
    /// What is wrong, without the position.
    pub message: String,
}

impl TemplateError {
    /// The message with its position: `line 2, column 7: …`.
    pub fn describe(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("line {l}, column {c}: {}", self.message),
            (Some(l), None) => format!("line {l}: {}", self.message),
            _ => self.message.clone(),
        }
    }
}

/// One rendering of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The subject, plain text on one line.
    pub subject: String,
    /// The HTML body.
    pub html: String,
    /// The plain-text alternative derived from `html`.
    pub text: String,
}

/// A subject and body parsed once, ready to render many times. Cheap to share (`Send + Sync`).
#[derive(Clone, Debug)]
pub struct CompiledTemplate {
    subject: Part,
    html: Part,
    source_bytes: usize,
}

/// How much one rendering may produce and loop: past either, it stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderLimits {
    /// Most output, subject and body together, in bytes.
    pub bytes: usize,
    /// Most `{{#each}}` work, in steps (see [`MAX_RENDER_STEPS`]).
    pub steps: u64,
}

impl RenderLimits {
    /// The limits of every message: [`MAX_RENDERED_BYTES`] and [`MAX_RENDER_STEPS`].
    pub const MESSAGE: RenderLimits = RenderLimits {
        bytes: MAX_RENDERED_BYTES,
        steps: MAX_RENDER_STEPS,
    };
}

/// Why a rendering within [`RenderLimits`] gave no output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenderFailure {
    /// It would have passed the limits (output or `{{#each}}` work); it stopped there.
    OverLimits(TemplateError),
    /// Any other error, which larger limits would not change.
    Failed(TemplateError),
}

impl RenderFailure {
    /// The error, whichever kind.
    pub fn into_error(self) -> TemplateError {
        match self {
            RenderFailure::OverLimits(e) | RenderFailure::Failed(e) => e,
        }
    }
}

/// One compiled part, with what maps its positions back to the text as written.
#[derive(Clone, Debug)]
struct Part {
    template: Template,
    columns: ColumnMap,
}

impl CompiledTemplate {
    /// Parses a subject and an HTML body; the error names the field and the position.
    pub fn compile(subject: &str, html: &str) -> Result<CompiledTemplate, TemplateError> {
        Ok(CompiledTemplate {
            subject: compile_one("subject", subject)?,
            html: compile_one("body", html)?,
            source_bytes: subject.len() + html.len(),
        })
    }

    /// The length of the subject and body as written, in bytes.
    pub fn source_bytes(&self) -> usize {
        self.source_bytes
    }

    /// Renders with `vars` (an object of variables; anything else renders every variable as
    /// missing).
    ///
    /// Refused, with the field, when the output would pass [`MAX_RENDERED_BYTES`] or the
    /// `{{#each}}` work [`MAX_RENDER_STEPS`]: the rendering stops there, it does not finish first.
    pub fn render(&self, vars: &Value) -> Result<Rendered, TemplateError> {
        self.render_within(vars, RenderLimits::MESSAGE)
            .map_err(RenderFailure::into_error)
    }

    /// [`CompiledTemplate::render`] within `limits` instead of the message's: a rendering that
    /// would pass them stops there, as [`RenderFailure::OverLimits`]. Rendering is
    /// deterministic, so any other failure is the one the message's limits would give.
    pub fn render_within(
        &self,
        vars: &Value,
        limits: RenderLimits,
    ) -> Result<Rendered, RenderFailure> {
        let ctx = Context::from(vars.clone());
        STEPS_LEFT.set(limits.steps);
        let subject = render_one("subject", &self.subject, &PLAIN, &ctx, limits, limits.bytes)?;
        let left = limits.bytes - subject.len();
        let html = render_one("body", &self.html, &HTML, &ctx, limits, left)?;
        let text = html_to_text(&html);
        Ok(Rendered {
            subject: one_line(&subject),
            html,
            text,
        })
    }
}

/// Checks the parts given (a subject, a body, or both) without keeping them: every error, the
/// subject's first. For validating a change that sends only one part.
pub fn check(subject: Option<&str>, body: Option<&str>) -> Vec<TemplateError> {
    [("subject", subject), ("body", body)]
        .into_iter()
        .filter_map(|(field, source)| compile_one(field, source?).err())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn render(body: &str, vars: &Value) -> String {
        CompiledTemplate::compile("s", body)
            .unwrap()
            .render(vars)
            .unwrap()
            .html
    }

    pub(super) fn subject(subject: &str, vars: &Value) -> String {
        CompiledTemplate::compile(subject, "b")
            .unwrap()
            .render(vars)
            .unwrap()
            .subject
    }

    pub(super) fn body_error(body: &str) -> TemplateError {
        CompiledTemplate::compile("s", body).unwrap_err()
    }

    #[test]
    fn variables_and_nested_paths() {
        let vars = json!({ "name": "Ann", "profile": { "tier": "gold", "seats": 3 } });
        assert_eq!(
            render("Hi {{name}}, {{profile.tier}} ({{ profile.seats }})", &vars),
            "Hi Ann, gold (3)"
        );
        assert_eq!(render("{{missing}}|{{profile.nope}}|", &vars), "||");
        assert_eq!(
            render("{{flag}} {{n}}", &json!({ "flag": true, "n": 2.5 })),
            "true 2.5"
        );
    }

    #[test]
    fn the_text_part_is_derived_from_the_rendered_html() {
        let t = CompiledTemplate::compile(
            "s",
            "<h1>Hi {{name}}</h1><p>Visit <a href=\"{{url}}\">our site</a>.</p>",
        )
        .unwrap();
        let r = t
            .render(&json!({ "name": "Ann & Bob", "url": "https://x.test/?a=1&b=2" }))
            .unwrap();
        assert_eq!(
            r.text,
            "Hi Ann & Bob\n\nVisit our site (https://x.test/?a=1&b=2)."
        );
    }

    #[test]
    fn a_compiled_template_renders_many_times() {
        let t = CompiledTemplate::compile("Hi {{name ?? 'you'}}", "<p>{{name}}</p>").unwrap();
        for (vars, want) in [
            (json!({ "name": "Ann" }), "Hi Ann"),
            (json!({}), "Hi you"),
            (json!(null), "Hi you"),
        ] {
            assert_eq!(t.render(&vars).unwrap().subject, want);
        }
        fn shared<T: Send + Sync>(_: &T) {}
        shared(&t);
    }
}
