//! Derives the plain-text part of arbitrary HTML: never a panic (libFuzzer's `-timeout` catches
//! work that is not linear in the input).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let html = String::from_utf8_lossy(data);
    let _ = herald_content::template::html_to_text(&html);
});
