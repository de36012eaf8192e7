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

pub mod fields;
mod text;

use std::cell::Cell;
use std::sync::LazyLock;

use handlebars::template::{Parameter, TemplateElement};
use handlebars::{
    BlockContext, BlockParams, Context, Handlebars, Helper, HelperDef, HelperResult, Output,
    RenderContext, RenderError, RenderErrorReason, Renderable, ScopedJson, Template, to_json,
};
use serde_json::Value;

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

/// The registry for the body: HTML escaping in `{{ }}`.
static HTML: LazyLock<Handlebars<'static>> = LazyLock::new(|| registry(true));
/// The registry for the subject: no escaping.
static PLAIN: LazyLock<Handlebars<'static>> = LazyLock::new(|| registry(false));

fn registry(escape_html: bool) -> Handlebars<'static> {
    let mut hb = Handlebars::new();
    if !escape_html {
        hb.register_escape_fn(handlebars::no_escape);
    }
    hb.register_helper(FALLBACK_HELPER, Box::new(Fallback));
    hb.register_helper("each", Box::new(MeteredEach));
    hb
}

thread_local! {
    /// Steps of `{{#each}}` work the rendering on this thread may still take. A rendering runs
    /// on one thread from start to end, and [`CompiledTemplate::render`] sets it first.
    static STEPS_LEFT: Cell<u64> = const { Cell::new(MAX_RENDER_STEPS) };
}

/// Takes `steps` from the rendering's budget, or refuses when it has not that many left.
fn take_steps(steps: u64) -> Result<(), RenderError> {
    let left = STEPS_LEFT.get();
    if steps > left {
        STEPS_LEFT.set(0);
        return Err(RenderErrorReason::Other(STEPS_EXCEEDED.into()).into());
    }
    STEPS_LEFT.set(left - steps);
    Ok(())
}

const STEPS_EXCEEDED: &str = "the template's loops do too much work";
const OUTPUT_EXCEEDED: &str = "the rendered output is too large";

/// Elements of a template, counting those of nested blocks.
fn element_count(t: &Template) -> u64 {
    let nested: u64 = t
        .elements
        .iter()
        .map(|e| match e {
            TemplateElement::HelperBlock(h) => [&h.template, &h.inverse]
                .into_iter()
                .flatten()
                .map(element_count)
                .sum(),
            _ => 0,
        })
        .sum();
    t.elements.len() as u64 + nested
}

/// The `handlebars` built-in `each` (same output, same `@index`, `@first`, `@last`, `@key` and
/// block parameters), which first takes its work from the rendering's budget: the whole loop
/// is paid for before it starts, so a loop too large is refused at once.
struct MeteredEach;

impl HelperDef for MeteredEach {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        take_steps(1)?;
        let value = h
            .param(0)
            .ok_or(RenderErrorReason::ParamNotFoundForIndex("each", 0))?;
        let Some(t) = h.template() else {
            return Ok(());
        };
        let items: Vec<(Value, &Value)> = match value.value() {
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (to_json(i), v))
                .collect(),
            Value::Object(map) => map.iter().map(|(k, v)| (to_json(k), v)).collect(),
            _ => Vec::new(),
        };
        if items.is_empty() {
            return match h.inverse() {
                Some(inverse) => inverse.render(r, ctx, rc, out),
                None => Ok(()),
            };
        }
        take_steps((items.len() as u64).saturating_mul(1 + element_count(t)))?;
        let is_object = value.value().is_object();
        let path = value.context_path();
        let mut block = BlockContext::new();
        match path {
            Some(p) => block.base_path_mut().clone_from(p),
            None => block.set_base_value(value.value().clone()),
        }
        rc.push_block(block);
        let len = items.len();
        for (i, (key, v)) in items.into_iter().enumerate() {
            if let Some(block) = rc.block_mut() {
                block.set_local_var("first", to_json(i == 0));
                block.set_local_var("last", to_json(i == len - 1));
                block.set_local_var("index", to_json(i));
                if is_object {
                    block.set_local_var("key", key.clone());
                }
                let segment = match &key {
                    Value::String(k) => k.clone(),
                    _ => i.to_string(),
                };
                match path {
                    Some(p) if i == 0 => {
                        let mut base = p.clone();
                        base.push(segment);
                        *block.base_path_mut() = base;
                    }
                    Some(_) => {
                        if let Some(last) = block.base_path_mut().last_mut() {
                            *last = segment;
                        }
                    }
                    None => block.set_base_value(v.clone()),
                }
                let mut params = BlockParams::new();
                let value_param = |params: &mut BlockParams<'rc>, name: &'rc str| match path {
                    Some(_) => params.add_path(name, Vec::new()),
                    None => params.add_value(name, v.clone()),
                };
                if let Some(name) = h.block_param() {
                    value_param(&mut params, name)?;
                    block.set_block_params(params);
                } else if let Some((name, key_name)) = h.block_param_pair() {
                    value_param(&mut params, name)?;
                    params.add_value(key_name, key.clone())?;
                    block.set_block_params(params);
                }
            }
            t.render(r, ctx, rc, out)?;
        }
        rc.pop_block();
        Ok(())
    }
}

/// Output that refuses to grow past its limit: rendering stops at the first write beyond it.
struct CappedOutput {
    buf: String,
    limit: usize,
    exceeded: bool,
}

impl Output for CappedOutput {
    fn write(&mut self, seg: &str) -> Result<(), std::io::Error> {
        if self.buf.len() + seg.len() > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other(OUTPUT_EXCEEDED));
        }
        self.buf.push_str(seg);
        Ok(())
    }
}

/// `{{__fallback a b c}}`: the first parameter that is present, not null and not `""`.
struct Fallback;

impl HelperDef for Fallback {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let chosen = h
            .params()
            .iter()
            .map(|p| p.value())
            .find(|v| !matches!(v, Value::Null) && v.as_str() != Some(""));
        Ok(ScopedJson::Derived(chosen.cloned().unwrap_or(Value::Null)))
    }
}

fn render_one(
    field: &'static str,
    part: &Part,
    registry: &'static Handlebars<'static>,
    ctx: &Context,
    limits: RenderLimits,
    left: usize,
) -> Result<String, RenderFailure> {
    let mut rc = RenderContext::new(None);
    let mut out = CappedOutput {
        buf: String::new(),
        limit: left,
        exceeded: false,
    };
    let rendered = part.template.render(registry, ctx, &mut rc, &mut out);
    if out.exceeded {
        let limit = if limits.bytes >= 1024 * 1024 {
            format!("{} MB", limits.bytes / (1024 * 1024))
        } else {
            format!("{} KB", limits.bytes / 1024)
        };
        return Err(RenderFailure::OverLimits(TemplateError {
            field,
            line: None,
            column: None,
            message: format!(
                "the rendered subject and body would be larger than {limit}, the message size \
                 limit; render less (fewer or smaller values, smaller loops)"
            ),
        }));
    }
    rendered.map_err(|e| {
        let over = matches!(e.reason(), RenderErrorReason::Other(m) if m == STEPS_EXCEEDED);
        let message = if over {
            format!(
                "the template's `{{{{#each}}}}` loops would take more than {} steps (an \
                 iteration costs one step per element it renders); loop over fewer items or \
                 nest fewer loops",
                limits.steps
            )
        } else {
            e.reason().to_string()
        };
        let error = TemplateError {
            field,
            line: e.line_no,
            column: e
                .line_no
                .zip(e.column_no)
                .map(|(l, c)| part.columns.original_column(l, c)),
            message,
        };
        if over {
            RenderFailure::OverLimits(error)
        } else {
            RenderFailure::Failed(error)
        }
    })?;
    Ok(out.buf)
}

/// Line breaks (and the runs they form) become one space.
fn one_line(s: &str) -> String {
    if !s.contains(['\r', '\n']) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut in_break = false;
    for c in s.chars() {
        if c == '\r' || c == '\n' {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
        } else {
            out.push(c);
            in_break = false;
        }
    }
    out
}

// -----------------------------------------------------------------------------------------------
// Compiling

fn compile_one(field: &'static str, source: &str) -> Result<Part, TemplateError> {
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

/// A problem found at a position of the template.
struct Located {
    line: usize,
    column: usize,
    message: String,
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

// -----------------------------------------------------------------------------------------------
// The fallback operator

/// A template rewritten for Handlebars, and where the rewriting changed the length of a line.
struct Rewritten {
    text: String,
    columns: ColumnMap,
}

/// Where the rewriting inserted (positive) or removed (negative) characters: `(line, column in
/// the rewritten text, change)`, in order.
#[derive(Clone, Debug, Default)]
struct ColumnMap(Vec<(usize, usize, isize)>);

impl ColumnMap {
    /// The column in the original text of a position in the rewritten text.
    fn original_column(&self, line: usize, column: usize) -> usize {
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
fn rewrite_template(src: &str) -> Result<Rewritten, Located> {
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

/// The mustaches of a source, in order: escaped ones (`\\{{`), comments and raw blocks are
/// skipped; the walk stops at the first one not closed (the parser reports it). Each byte of
/// the source is read a bounded number of times.
struct Mustaches<'a> {
    src: &'a str,
    /// Where the search for the next `{{` starts.
    at: usize,
}

impl<'a> Mustaches<'a> {
    fn new(src: &'a str) -> Mustaches<'a> {
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

/// Line and column (1-based, in characters) while walking the source.
#[derive(Clone, Copy)]
struct Position {
    line: usize,
    column: usize,
}

impl Default for Position {
    fn default() -> Position {
        Position { line: 1, column: 1 }
    }
}

impl Position {
    fn advance(&mut self, text: &str) {
        for c in text.chars() {
            if c == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
        }
    }

    fn after(self, text: &str) -> Position {
        let mut p = self;
        p.advance(text);
        p
    }

    fn located(self, message: String) -> Located {
        Located {
            line: self.line,
            column: self.column,
            message,
        }
    }
}

/// One `{{ … }}` or `{{{ … }}}` of the source (byte offsets).
struct Mustache {
    /// Start of the expression, after `{{`, `~` and `{`.
    body_start: usize,
    /// End of the expression, before the closing `~`, `}` and `}}`.
    body_end: usize,
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
fn top_level_space(operand: &str) -> Option<usize> {
    top_level(operand, 0, operand.len())
        .find(|(_, b)| b.is_ascii_whitespace())
        .map(|(p, _)| p)
}

/// The bytes of `src[from..to]` outside quoted strings, parentheses (subexpressions) and
/// brackets (path segments such as `[first name]`), with their offsets.
fn top_level(src: &str, from: usize, to: usize) -> impl Iterator<Item = (usize, u8)> + '_ {
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
fn is_symbol_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '$' | ':') || !c.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(body: &str, vars: &Value) -> String {
        CompiledTemplate::compile("s", body)
            .unwrap()
            .render(vars)
            .unwrap()
            .html
    }

    fn subject(subject: &str, vars: &Value) -> String {
        CompiledTemplate::compile(subject, "b")
            .unwrap()
            .render(vars)
            .unwrap()
            .subject
    }

    fn body_error(body: &str) -> TemplateError {
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

    #[test]
    fn html_is_escaped_in_double_braces_and_raw_in_triple() {
        let vars = json!({ "v": "<b>\"Tom\" & 'Jerry'</b>" });
        assert_eq!(
            render("{{v}}", &vars),
            "&lt;b&gt;&quot;Tom&quot; &amp; &#x27;Jerry&#x27;&lt;/b&gt;"
        );
        assert_eq!(render("{{{v}}}", &vars), "<b>\"Tom\" & 'Jerry'</b>");
        // The fallback is escaped or raw the same way.
        assert_eq!(render("{{x ?? v ?? ''}}", &vars), render("{{v}}", &vars));
        assert_eq!(
            render("{{{ x ?? v ?? '' }}}", &vars),
            "<b>\"Tom\" & 'Jerry'</b>"
        );
        assert_eq!(render("{{{x??\"<i>\"}}}", &vars), "<i>");
        assert_eq!(
            render("{{~{x ?? v ?? ''}~}}", &vars),
            "<b>\"Tom\" & 'Jerry'</b>"
        );
    }

    #[test]
    fn the_subject_is_plain_text_on_one_line() {
        let vars = json!({ "v": "Tom & <Jerry>", "multi": "a\r\nb\nc" });
        assert_eq!(subject("Hi {{v}}", &vars), "Hi Tom & <Jerry>");
        assert_eq!(subject("{{multi}}!", &vars), "a b c!");
        assert_eq!(subject("{{name ?? \"you & me\"}}", &vars), "you & me");
    }

    #[test]
    fn blocks_and_helpers_work() {
        let vars = json!({ "items": [{ "n": "a" }, { "n": "b" }], "vip": true, "plan": "pro" });
        assert_eq!(
            render(
                "{{#each items}}{{n}}{{#unless @last}},{{/unless}}{{/each}}{{#if vip}}!{{else}}?{{/if}}",
                &vars
            ),
            "a,b!"
        );
        assert_eq!(
            render("{{#if (eq plan \"pro\")}}P{{/if}}{{len items}}", &vars),
            "P2"
        );
    }

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
    fn render_errors_name_the_field_and_position() {
        let t = CompiledTemplate::compile("s", "a\n{{#each}}x{{/each}}").unwrap();
        let e = t.render(&json!({})).unwrap_err();
        assert_eq!(
            (e.field, e.line, e.column),
            ("body", Some(2), Some(1)),
            "{e:?}"
        );
        // Columns after a fallback refer to the text as written.
        let t = CompiledTemplate::compile("s", "{{a ?? 'b'}} {{#each}}x{{/each}}").unwrap();
        let e = t.render(&json!({})).unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(14)), "{e:?}");
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

    #[test]
    fn rendering_stops_at_the_output_and_loop_limits() {
        let list: Vec<u32> = (0..1000).collect();
        let vars = json!({ "l": list, "big": "x".repeat(1024 * 1024) });
        let started = std::time::Instant::now();
        let loops = "{{#each l}}{{#each ../l}}{{#each ../../l}}x{{/each}}{{/each}}{{/each}}";
        let e = CompiledTemplate::compile("s", loops)
            .unwrap()
            .render(&vars)
            .unwrap_err();
        assert_eq!(e.field, "body");
        assert!(
            e.message.contains("`{{#each}}` loops would take more than"),
            "{e}"
        );
        let e = CompiledTemplate::compile("s", &"{{big}}".repeat(50))
            .unwrap()
            .render(&vars)
            .unwrap_err();
        assert!(e.message.contains("larger than 40 MB"), "{e}");
        // The subject counts too.
        let e = CompiledTemplate::compile(&"{{big}}".repeat(50), "b")
            .unwrap()
            .render(&vars)
            .unwrap_err();
        assert_eq!(e.field, "subject");
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
        // A loop within the limits renders as the built-in `each` does.
        let t = "{{#each o}}{{@key}}={{this}}{{#if @first}}<{{/if}}{{#if @last}}>{{/if}};{{/each}}\
                 {{#each l as |v i|}}{{i}}:{{v}}{{/each}}{{#each none}}-{{else}}empty{{/each}}";
        let vars = json!({ "o": { "a": 1, "b": 2 }, "l": ["x", "y"] });
        assert_eq!(render(t, &vars), "a=1<;b=2>;0:x1:yempty");
    }

    #[test]
    fn smaller_limits_stop_early_and_tell_it_apart_from_other_failures() {
        let small = RenderLimits {
            bytes: 1024,
            steps: 100,
        };
        let vars = json!({ "l": (0..200).collect::<Vec<u32>>(), "s": "x".repeat(600) });
        // Within the smaller limits: the same rendering as the message's limits give.
        let t = CompiledTemplate::compile(
            "Hi {{s}}",
            "<p>{{#each l}}{{#if @first}}{{this}}{{/if}}{{/each}}</p>",
        )
        .unwrap();
        assert_eq!(
            t.render_within(
                &vars,
                RenderLimits {
                    steps: 1000,
                    ..small
                }
            ),
            Ok(t.render(&vars).unwrap())
        );
        // Past them (the loop's steps; the output, subject and body together): over the
        // limits, and the message's limits render it.
        let e = t.render_within(&vars, small).unwrap_err();
        assert!(
            matches!(&e, RenderFailure::OverLimits(e) if e.message.contains("more than 100 steps")),
            "{e:?}"
        );
        // Within other blocks too.
        let nested = "{{#with l}}{{#if ../s}}{{#each ../l}}{{#each ../../l}}.{{/each}}{{/each}}\
                      {{/if}}{{/with}}";
        let t = CompiledTemplate::compile("s", nested).unwrap();
        let e = t.render_within(&vars, small).unwrap_err();
        assert!(matches!(&e, RenderFailure::OverLimits(_)), "{e:?}");
        assert!(t.render(&vars).is_ok());
        let t = CompiledTemplate::compile("{{s}}", "<p>{{s}}</p>").unwrap();
        let e = t.render_within(&vars, small).unwrap_err();
        assert!(
            matches!(&e, RenderFailure::OverLimits(e)
                if e.field == "body" && e.message.contains("larger than 1 KB")),
            "{e:?}"
        );
        assert_eq!(t.render(&vars).unwrap().html.len(), 607);
        // Any other failure is the one the message's limits give.
        let t = CompiledTemplate::compile("s", "{{#each}}x{{/each}}").unwrap();
        assert_eq!(
            t.render_within(&vars, small),
            Err(RenderFailure::Failed(t.render(&vars).unwrap_err()))
        );
        assert_eq!(t.source_bytes(), 20);
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
