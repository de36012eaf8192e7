//! What a send's small template work costs where it is asked for, beside what a trip to the CPU
//! pool and back costs (a plain bench binary): the reason `services::cpu` builds one recipient's
//! small email on the async worker. Printed: the trip, `CpuPool::run` of nothing, awaited from
//! a task on a two-worker runtime; compiling and rendering the send benchmark's own subject and
//! body (`host/benches/http/send.lua`); and the slowest work the inline limits let through,
//! each at those limits: the most parsing allowed (and a parse they send to the pool),
//! expressions that each compare variables as large as allowed, output up to its limit, loops
//! up to theirs.
//!
//! Run: `cargo bench -p herald --bench cpu` (release build). Figures go to
//! `docs/benchmarks.md` under "Small sends rendered where they are handled".

use std::time::{Duration, Instant};

use herald::domain::template::CompiledTemplate;
use herald::services::cpu::{
    CpuPool, INLINE_PARSE_BYTES, INLINE_PARSE_WORK, INLINE_RENDER, INLINE_SOURCE_BYTES,
    INLINE_VARIABLE_BYTES, json_size_within, parse_is_small,
};
use serde_json::{Value, json};

/// Median time of `f` over `runs` runs (after a warm-up of as many).
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..runs {
        f();
    }
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A text of `expression` repeated up to the inline size.
fn at_size(expression: &str) -> String {
    expression.repeat(INLINE_SOURCE_BYTES / expression.len())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let pool = CpuPool::new(2);
    let trips = 20_000;
    let trip = runtime.block_on(async move {
        tokio::spawn(async move {
            let t = Instant::now();
            for i in 0..trips {
                std::hint::black_box(pool.run(move || i).await);
            }
            t.elapsed() / trips
        })
        .await
        .expect("task")
    });
    println!(
        "a trip to the CPU pool and back (nothing done there): {}",
        us(trip)
    );

    // The send benchmark's request (send.lua), its variables as a new contact's.
    let subject = "Your order {{order ?? \"#1\"}}";
    let body = "<html><body><p>Hello {{firstName ?? \"there\"}},</p><p>Thanks for your order. \
                <a href=\"https://shop.example/orders/1\">See it here</a>.</p></body></html>";
    let vars = json!({
        "firstName": "Ann", "email": "r1-1-1@example.com", "id": "cnt_0123456789abcdef",
        "svc_id": "cnt_0123456789abcdef", "svc_email": "r1-1-1@example.com",
        "unsubscribeUrl": "https://herald.example/unsubscribe/0123456789abcdef0123456789abcdef",
        "subscribeUrl": "https://herald.example/subscribe/0123456789abcdef0123456789abcdef",
        "manageUrl": "https://herald.example/manage/0123456789abcdef0123456789abcdef",
    });
    let compiled = CompiledTemplate::compile(subject, body).expect("compiles");
    println!(
        "the send benchmark's subject and body: compiled in {}, rendered in {}",
        us(median(2_000, || {
            std::hint::black_box(CompiledTemplate::compile(subject, body).expect("compiles"));
        })),
        us(median(2_000, || {
            std::hint::black_box(
                compiled
                    .render_within(&vars, INLINE_RENDER)
                    .expect("renders"),
            );
        })),
    );

    // The slowest work the inline limits let through, and the parse they keep off the workers.
    let expressions = INLINE_PARSE_WORK / INLINE_PARSE_BYTES;
    let allowed = format!(
        "{}{}",
        "{{a}}".repeat(expressions),
        "x".repeat(INLINE_PARSE_BYTES - 5 * expressions)
    );
    assert!(parse_is_small("", &allowed));
    // Too long, and too many expressions.
    let long = "x".repeat(INLINE_SOURCE_BYTES);
    let many = "{{a}}".repeat(4096 / 5);
    assert!(!parse_is_small("", &long) && !parse_is_small("", &many));
    for (what, text) in [
        ("parsed where asked", &allowed),
        ("parsed on the pool", &long),
        ("parsed on the pool", &many),
    ] {
        println!(
            "compiling {} bytes with {} expressions ({what}): {}",
            text.len(),
            text.matches("{{").count(),
            us(median(50, || {
                std::hint::black_box(CompiledTemplate::compile("s", text).expect("compiles"));
            })),
        );
    }
    // Two variables that fill the variables' allowance, compared by every expression.
    let half = "x".repeat(INLINE_VARIABLE_BYTES / 2 - 16);
    let big = json!({ "a": half, "b": half });
    assert!(json_size_within(
        big.as_object().expect("an object"),
        INLINE_VARIABLE_BYTES
    ));
    let worst: [(&str, String, Value); 4] = [
        (
            "comparisons of the largest variables",
            at_size("{{#if (eq a b)}}y{{/if}}"),
            big.clone(),
        ),
        ("output to its limit", at_size("{{a}}"), big.clone()),
        (
            "loops to their limit",
            at_size("{{#each l}}{{#each ../l}}.{{/each}}{{/each}}"),
            json!({ "l": (0..200).collect::<Vec<u32>>() }),
        ),
        (
            "lookups of the largest variables",
            at_size("{{len a}}{{lookup b 0}}"),
            big,
        ),
    ];
    for (what, text, vars) in worst {
        let t = CompiledTemplate::compile("s", &text).expect("compiles");
        let mut outcome = String::new();
        let took = median(50, || {
            outcome = match t.render_within(&vars, INLINE_RENDER) {
                Ok(r) => format!("rendered {} bytes", r.html.len()),
                Err(e) => format!("stopped: {}", e.into_error().message),
            };
        });
        println!("{what}: {} ({outcome})", us(took));
    }
}
