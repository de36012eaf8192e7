//! Generates the client from `openapi/openapi.json` with progenitor, unedited, into
//! `$OUT_DIR/client.rs`.
//!
//! progenitor takes one success type and one error type per operation, and JSON (or raw) request
//! bodies of a named content type. The document has sixteen operations beyond that. Two are
//! calls an application makes, with `multipart/form-data` bodies that progenitor does not
//! generate: the CSV import (`POST /contacts/import`) and the image upload (`POST
//! /uploads/image`); the API tests cover them. None of the other fourteen is called through a
//! client: the pages a recipient's browser opens from an email
//! (`/unsubscribe/{token}`, `/subscribe/{token}`, `/manage/{token}` and the preference form's
//! `POST` to it, the click redirect `/t/c/{token}`, the confirmation of a subscription
//! `/confirm/{token}`, the "view in browser" page `/view/{token}`), which answer an HTML page or
//! a JSON error; `POST /projects/{id}/members`,
//! which answers the member (201) or the invitation (202); and the receivers that a mail
//! provider and a payment provider call with a body of their own type (`*/*`, signed over its
//! bytes): `/webhooks/notify`, `/webhooks/notify/{transport}` and
//! `/webhooks/incoming/payments`. Those are left out of the generated client; every other operation is generated as the document states it. The build fails if the document ever gains another operation that
//! progenitor cannot take, rather than dropping it silently.

use std::path::Path;

/// Operations progenitor cannot generate (several success or error types), by path and method.
const LEFT_OUT: [(&str, &str); 16] = [
    ("/unsubscribe/{token}", "get"),
    ("/unsubscribe/{token}", "post"),
    ("/subscribe/{token}", "get"),
    ("/subscribe/{token}", "post"),
    ("/manage/{token}", "get"),
    ("/manage/{token}", "post"),
    ("/t/c/{token}", "get"),
    ("/confirm/{token}", "get"),
    ("/confirm/{token}", "post"),
    ("/view/{token}", "get"),
    ("/projects/{id}/members", "post"),
    ("/webhooks/notify", "post"),
    ("/webhooks/notify/{transport}", "post"),
    ("/webhooks/incoming/payments", "post"),
    ("/contacts/import", "post"),
    ("/uploads/image", "post"),
];

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi/openapi.json");
    println!("cargo:rerun-if-changed={}", src.display());
    let text = std::fs::read_to_string(&src).expect("openapi/openapi.json");
    let mut document: serde_json::Value = serde_json::from_str(&text).expect("a JSON document");
    let paths = document["paths"]
        .as_object_mut()
        .expect("the document's paths");
    for (path, method) in LEFT_OUT {
        let operations = paths
            .get_mut(path)
            .and_then(|p| p.as_object_mut())
            .unwrap_or_else(|| panic!("{path} is no longer in the document: update LEFT_OUT"));
        operations.remove(method).unwrap_or_else(|| {
            panic!("{method} {path} is no longer in the document: update LEFT_OUT")
        });
        if !operations.keys().any(|k| {
            matches!(
                k.as_str(),
                "get" | "put" | "post" | "delete" | "options" | "head" | "patch" | "trace"
            )
        }) {
            paths.remove(path);
        }
    }
    let spec = serde_json::from_value(document).expect("an OpenAPI 3.0 document");
    let mut generator = progenitor::Generator::default();
    let tokens = generator
        .generate_tokens(&spec)
        .expect("progenitor generates the client");
    let ast = syn::parse2(tokens).expect("generated code parses");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("client.rs");
    std::fs::write(out, prettyplease::unparse(&ast)).expect("write the client");
}
