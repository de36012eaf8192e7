//! Rendering a compiled part: the two registries (HTML-escaping for the body, plain for the
//! subject), the fallback helper, the metered `{{#each}}` and the capped output that hold a
//! rendering within its [`RenderLimits`].

use std::cell::Cell;
use std::sync::LazyLock;

use handlebars::template::TemplateElement;
use handlebars::{
    BlockContext, BlockParams, Context, Handlebars, Helper, HelperDef, HelperResult, Output,
    RenderContext, RenderError, RenderErrorReason, Renderable, ScopedJson, Template, to_json,
};
use serde_json::Value;

use super::{FALLBACK_HELPER, MAX_RENDER_STEPS, Part, RenderFailure, RenderLimits, TemplateError};

/// The registry for the body: HTML escaping in `{{ }}`.
pub(super) static HTML: LazyLock<Handlebars<'static>> = LazyLock::new(|| registry(true));
/// The registry for the subject: no escaping.
pub(super) static PLAIN: LazyLock<Handlebars<'static>> = LazyLock::new(|| registry(false));

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
    /// on one thread from start to end, and
    /// [`CompiledTemplate::render`](super::CompiledTemplate::render) sets it first.
    pub(super) static STEPS_LEFT: Cell<u64> = const { Cell::new(MAX_RENDER_STEPS) };
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

pub(super) fn render_one(
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
pub(super) fn one_line(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{render, subject};
    use super::super::{CompiledTemplate, RenderFailure, RenderLimits};

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
}
