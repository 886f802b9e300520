//! dlq-core's validator (`dlq_core::catalog::validate`) against `jsonschema` (default features
//! off) on the schemas schemars derives for dlq-like event types: speed, agreement with serde's
//! own decode, and the message an operator reads. See docs/BENCHMARKS.md.
//!
//! ```sh
//! cargo run --release --manifest-path bench/Cargo.toml --no-default-features --features jsonschema --bin schema_check
//! ```
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use dlq_core::catalog::{SchemaError, validate};
use dlq_core::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

// dlq-core/tests/versions.rs
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Payment {
    id: u64,
    amount_cents: i64,
}

// dlq-core/src/validate.rs, `derived` tests
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Amount {
    cents: i64,
    currency: Currency,
}
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
enum Currency {
    #[serde(rename = "EUR")]
    Eur,
    #[serde(rename = "USD")]
    Usd,
}
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
enum Method {
    Cash,
    Card { last4: String, expires: Option<u16> },
    Wire(String),
}
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Source {
    Web { session: String },
    Batch { file: String, line: u32 },
}
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
#[serde(deny_unknown_fields)]
struct RichPayment {
    id: u64,
    attempt: i32,
    ratio: f64,
    note: Option<String>,
    refund_of: Option<Box<Amount>>,
    amount: Amount,
    lines: Vec<Amount>,
    method: Method,
    source: Source,
    labels: BTreeMap<String, u8>,
    #[serde(default)]
    flagged: bool,
}

// Shapes whose schemas carry keywords outside validate.rs's subset.
/// An integer-keyed map: `patternProperties`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct ShardCounts {
    by_shard: HashMap<u32, u8>,
}
/// schemars' validation attributes: `pattern` (and `minLength`/`maxLength`, which we check).
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Sku {
    #[schemars(regex(pattern = r"^[A-Z]{3}-\d{4}$"))]
    code: String,
    #[schemars(length(min = 1, max = 8))]
    label: String,
}
/// A flattened enum under `deny_unknown_fields`: `unevaluatedProperties`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
#[serde(deny_unknown_fields)]
struct Refund {
    id: u64,
    #[serde(flatten)]
    reason: Reason,
}
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
#[serde(tag = "reason", rename_all = "snake_case")]
enum Reason {
    Fraud { case: String },
    Duplicate { of: u64 },
}
/// A flattened enum beside a flattened map of extras (serde supports this pair; it does not
/// support `deny_unknown_fields` with `flatten`): `unevaluatedProperties` with a schema.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Chargeback {
    id: u64,
    #[serde(flatten)]
    reason: Reason,
    #[serde(flatten)]
    extra: BTreeMap<String, u8>,
}
/// `NonZeroU32`: `not: {const: 0}` (we check it).
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "dlq_core::schemars")]
struct Batch {
    size: NonZeroU32,
}

fn schema<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

fn rich() -> Value {
    let amount = || Amount { cents: -250, currency: Currency::Usd };
    serde_json::to_value(RichPayment {
        id: u64::MAX,
        attempt: -3,
        ratio: 0.5,
        note: None,
        refund_of: Some(Box::new(amount())),
        amount: amount(),
        lines: vec![amount(), Amount { cents: 0, currency: Currency::Eur }],
        method: Method::Card { last4: "4242".to_owned(), expires: Some(2030) },
        source: Source::Batch { file: "f.csv".to_owned(), line: 9 },
        labels: BTreeMap::from([("a".to_owned(), 255)]),
        flagged: true,
    })
    .unwrap()
}

fn with(value: &Value, pointer: &str, new: Value) -> Value {
    let mut v = value.clone();
    *v.pointer_mut(pointer).unwrap() = new;
    v
}

/// Nanoseconds per call: the fastest of 7 rounds of `n` calls (the machine is shared: the
/// fastest round is the one least disturbed).
fn time(n: u32, mut f: impl FnMut()) -> f64 {
    let rounds: Vec<f64> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    rounds.into_iter().fold(f64::INFINITY, f64::min)
}

fn ours(schema: &Value, value: &Value) -> String {
    match validate(schema, value) {
        Ok(()) => "valid".into(),
        Err(SchemaError::Invalid(why)) => format!("invalid: {why}"),
        Err(e @ SchemaError::Unsupported(_)) => format!("UNCHECKED: {e}"),
    }
}

fn theirs(validator: &jsonschema::Validator, value: &Value) -> String {
    match validator.validate(value) {
        Ok(()) => "valid".into(),
        Err(e) => format!("invalid: {}: {e}", path(&e)),
    }
}

fn path(e: &jsonschema::ValidationError<'_>) -> String {
    let p = e.instance_path().to_string();
    if p.is_empty() { "/".into() } else { p }
}

fn decodes<T: DeserializeOwned>(value: &Value) -> bool {
    serde_json::from_value::<T>(value.clone()).is_ok()
}

struct Case {
    ty: &'static str,
    what: &'static str,
    schema: Value,
    value: Value,
    serde: bool,
}

fn case<T: JsonSchema + DeserializeOwned>(ty: &'static str, what: &'static str, value: Value) -> Case {
    Case { ty, what, schema: schema::<T>(), serde: decodes::<T>(&value), value }
}

fn main() {
    let simple = json!({"id": 7, "amount_cents": -250});
    let r = rich();
    let speed = [
        case::<Payment>("Payment", "valid", simple.clone()),
        case::<Payment>("Payment", "invalid: id is a string", with(&simple, "/id", json!("7"))),
        case::<RichPayment>("RichPayment", "valid", r.clone()),
        case::<RichPayment>("RichPayment", "invalid: /lines/1/cents null", with(&r, "/lines/1/cents", json!(null))),
        case::<RichPayment>(
            "RichPayment",
            "invalid: /source kind mail",
            with(&r, "/source", json!({"kind": "mail", "session": "s"})),
        ),
    ];

    println!("## Speed (ns per call, fastest of 7 rounds; release build)\n");
    println!(
        "| type | payload | ours `validate` | jsonschema, validator built once: `validate` | jsonschema, built per call | jsonschema build alone |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for c in &speed {
        let v = jsonschema::validator_for(&c.schema).unwrap();
        // Both produce what an operator reads: the verdict and its message.
        let a = time(200_000, || {
            black_box(ours(black_box(&c.schema), black_box(&c.value)));
        });
        let b = time(200_000, || {
            black_box(theirs(black_box(&v), black_box(&c.value)));
        });
        let d = time(2_000, || {
            let v = jsonschema::validator_for(black_box(&c.schema)).unwrap();
            black_box(theirs(&v, black_box(&c.value)));
        });
        let e = time(2_000, || {
            black_box(jsonschema::validator_for(black_box(&c.schema)).unwrap());
        });
        println!("| {} | {} | {a:.0} | {b:.0} | {d:.0} | {e:.0} |", c.ty, c.what);
    }

    let sku = json!({"code": "ABC-1234", "label": "ok"});
    let shards = json!({"by_shard": {"3": 7}});
    let refund = json!({"id": 1, "reason": "fraud", "case": "c-1"});
    let coverage = [
        // Integer semantics: serde does not decode 5.0 or 2^64 into a u64.
        case::<Payment>("Payment", "id 7.0", with(&simple, "/id", json!(7.0))),
        case::<Payment>(
            "Payment",
            "id 2^64 (a float in serde_json)",
            serde_json::from_str(r#"{"id": 18446744073709551616, "amount_cents": 1}"#).unwrap(),
        ),
        case::<Payment>("Payment", "id -1", with(&simple, "/id", json!(-1))),
        case::<RichPayment>("RichPayment", "labels.a 256 (u8)", with(&r, "/labels/a", json!(256))),
        case::<RichPayment>(
            "RichPayment",
            "unknown field",
            with(&r, "/note", json!("n"))
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.insert("surprise".into(), json!(1));
                    Value::Object(o)
                })
                .unwrap(),
        ),
        case::<RichPayment>("RichPayment", "method Cheque", with(&r, "/method", json!("Cheque"))),
        case::<Batch>("Batch (NonZeroU32)", "size 0", json!({"size": 0})),
        case::<Batch>("Batch (NonZeroU32)", "size 3", json!({"size": 3})),
        case::<Sku>("Sku (`pattern`)", "valid", sku.clone()),
        case::<Sku>("Sku (`pattern`)", "code abc", with(&sku, "/code", json!("abc"))),
        case::<Sku>("Sku (`pattern`)", "label 9 chars", with(&sku, "/label", json!("123456789"))),
        case::<ShardCounts>("ShardCounts (`patternProperties`)", "valid", shards.clone()),
        case::<ShardCounts>("ShardCounts (`patternProperties`)", "key x", json!({"by_shard": {"x": 7}})),
        case::<ShardCounts>("ShardCounts (`patternProperties`)", "value 300", json!({"by_shard": {"3": 300}})),
        case::<Refund>("Refund (`unevaluatedProperties`)", "valid", refund.clone()),
        case::<Refund>(
            "Refund (`unevaluatedProperties`)",
            "unknown field",
            with(&refund, "/case", json!("c-1"))
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.insert("extra".into(), json!(true));
                    Value::Object(o)
                })
                .unwrap(),
        ),
        case::<Chargeback>(
            "Chargeback (`unevaluatedProperties`)",
            "valid",
            json!({"id": 1, "reason": "duplicate", "of": 9, "retries": 3}),
        ),
        case::<Chargeback>(
            "Chargeback (`unevaluatedProperties`)",
            "extra 300 (u8)",
            json!({"id": 1, "reason": "duplicate", "of": 9, "retries": 300}),
        ),
        case::<Refund>("Refund (`unevaluatedProperties`)", "reason spam", json!({"id": 1, "reason": "spam"})),
    ];

    println!("\n## Keywords in the schemas\n");
    for (name, s) in [
        ("Payment", schema::<Payment>()),
        ("RichPayment", schema::<RichPayment>()),
        ("Batch", schema::<Batch>()),
        ("Sku", schema::<Sku>()),
        ("ShardCounts", schema::<ShardCounts>()),
        ("Refund", schema::<Refund>()),
        ("Chargeback", schema::<Chargeback>()),
    ] {
        println!("- {name}: {}", serde_json::to_string(&s).unwrap());
    }

    println!("\n## Verdicts against serde's own decode\n");
    println!("| type | payload | serde decodes | ours | jsonschema |");
    println!("|---|---|---|---|---|");
    let mut wrong = (0, 0);
    for c in coverage.iter().chain(&speed) {
        let v = jsonschema::validator_for(&c.schema).unwrap();
        let (a, b) = (ours(&c.schema, &c.value), theirs(&v, &c.value));
        let mark = |s: &str| {
            let said = if s == "valid" {
                Some(true)
            } else if s.starts_with("invalid") {
                Some(false)
            } else {
                None
            };
            match said {
                Some(x) if x == c.serde => format!("ok: {s}"),
                Some(false) if c.ty.starts_with("Sku") => format!("stricter than serde: {s}"),
                // serde refuses `deny_unknown_fields` with `flatten`, and a flattened map beside a
                // flattened enum (the map sees the enum's fields): schemars' schema cannot say so.
                Some(true) if c.what == "valid" && !c.serde => format!("schema looser than serde: {s}"),
                Some(_) => format!("**WRONG**: {s}"),
                None => format!("(unchecked) {s}"),
            }
        };
        let (ma, mb) = (mark(&a), mark(&b));
        wrong.0 += usize::from(ma.starts_with("**"));
        wrong.1 += usize::from(mb.starts_with("**"));
        println!("| {} | {} | {} | {} | {} |", c.ty, c.what, c.serde, ma.replace('|', "\\|"), mb.replace('|', "\\|"));
    }
    println!("\nwrong verdicts: ours {}, jsonschema {}", wrong.0, wrong.1);

    println!("\n## All errors jsonschema reports (iter_errors), RichPayment with /source kind mail\n");
    let c = &speed[4];
    let v = jsonschema::validator_for(&c.schema).unwrap();
    for e in v.iter_errors(&c.value) {
        println!("- {}: {e}", e.instance_path());
    }
    let long = with(&r, "/method", json!("x".repeat(300)));
    println!("\n## A 300-character string where an enum is expected\n");
    println!("- ours: {}", ours(&c.schema, &long));
    let t = theirs(&v, &long);
    println!("- jsonschema: {} chars: {}…", t.len(), t.chars().take(80).collect::<String>());
    let e = v.validate(&long).unwrap_err();
    println!("- jsonschema `masked()`: {}: {}", path(&e), e.masked());
    println!("\n## Messages, masked (values hidden)\n");
    for c in speed.iter().filter(|c| c.what != "valid") {
        let v = jsonschema::validator_for(&c.schema).unwrap();
        let e = v.validate(&c.value).unwrap_err();
        println!("- {} {}: {}: {}", c.ty, c.what, path(&e), e.masked());
    }
}
