//! Compiles and renders arbitrary templates: never a panic, and the output within its cap.
//! Input: `subject \0 body \0 variables-as-JSON` (missing parts are empty; variables that are
//! not a JSON object are replaced by a fixed set with lists and nested objects).
#![no_main]

use herald_content::template::{CompiledTemplate, MAX_RENDERED_BYTES};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let subject = parts.next().unwrap_or("");
    let body = parts.next().unwrap_or("");
    let vars = parts
        .next()
        .and_then(|v| serde_json::from_str::<Value>(v).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| {
            json!({
                "name": "Ann", "n": 3, "ok": true, "none": null,
                "l": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                "o": { "a": { "b": "deep" }, "l": ["x", "y"] },
            })
        });
    if let Ok(template) = CompiledTemplate::compile(subject, body)
        && let Ok(rendered) = template.render(&vars)
    {
        let size = rendered.subject.len() + rendered.html.len();
        assert!(size <= MAX_RENDERED_BYTES, "{size} bytes rendered");
    }
});
