//! A JSON Schema validator for exactly the subset `schemars` emits for serde types: what the
//! stock CLI and the console check stored payloads with, against the schemas of the type
//! catalog. A schema keyword outside the subset is refused ([`SchemaError::Unsupported`]), so a
//! payload is never called valid against a rule that was not checked.

use std::fmt;

use serde_json::{Map, Value};

/// Why a payload could not be checked against a schema, or does not satisfy it.
///
/// ```
/// use dlq_core::catalog::{SchemaError, validate};
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}});
/// assert!(validate(&schema, &json!({"id": 7})).is_ok());
/// let SchemaError::Invalid(why) = validate(&schema, &json!({"id": "7"})).unwrap_err() else { panic!() };
/// assert_eq!(why, "/id: expected integer, found string");
/// let odd = json!({"type": "string", "pattern": "^a"});
/// assert!(matches!(validate(&odd, &json!("a")), Err(SchemaError::Unsupported(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// The payload does not satisfy the schema: where (a JSON pointer) and why.
    Invalid(String),
    /// The schema uses something this validator does not check (a keyword outside what
    /// `schemars` emits for serde types, a `$ref` outside the document).
    Unsupported(String),
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(why) => f.write_str(why),
            Self::Unsupported(what) => write!(f, "the schema cannot be checked here: {what}"),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Keywords that say nothing about validity.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
];

/// Checks `value` against `schema` (JSON Schema 2020-12 or draft 7, as `schemars` writes them).
///
/// # Errors
/// [`SchemaError::Invalid`] with the first violation found; [`SchemaError::Unsupported`] when
/// the schema needs a keyword this validator does not check.
pub fn validate(schema: &Value, value: &Value) -> Result<(), SchemaError> {
    Checker { root: schema, depth: 0 }.check(schema, value, "")
}

struct Checker<'a> {
    root: &'a Value,
    depth: usize,
}

/// How deep `$ref`s may nest (a recursive type on a deep payload).
const MAX_DEPTH: usize = 256;

fn invalid(at: &str, why: impl fmt::Display) -> SchemaError {
    SchemaError::Invalid(format!("{}: {why}", if at.is_empty() { "/" } else { at }))
}

/// A JSON value's type; `5.0` is a number, not an integer: serde does not decode it into one.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    let actual = type_name(value);
    actual == name || (name == "number" && actual == "integer")
}

/// `/`-joined pointer segment, escaped as RFC 6901 says.
/// The keywords [`validate`] judges; any other keyword but an annotation is refused.
const KEYWORDS: &[&str] = &[
    "$ref",
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
];

fn push(at: &str, segment: &str) -> String {
    format!("{at}/{}", segment.replace('~', "~0").replace('/', "~1"))
}

impl Checker<'_> {
    fn check(&mut self, schema: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
        let keywords = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(invalid(at, "no value is allowed here")),
            Value::Object(keywords) => keywords,
            other => return Err(SchemaError::Unsupported(format!("a schema must be an object, found {other}"))),
        };
        // A keyword outside the subset is refused before any is judged: keywords come in
        // alphabetical order, and one judged first (`additionalProperties: false`) would call a
        // value invalid that a keyword after it (`patternProperties`) allows.
        if let Some(other) =
            keywords.keys().find(|k| !ANNOTATIONS.contains(&k.as_str()) && !KEYWORDS.contains(&k.as_str()))
        {
            return Err(unsupported(&format!("keyword `{other}`")));
        }
        for (keyword, rule) in keywords {
            match keyword.as_str() {
                k if ANNOTATIONS.contains(&k) => {}
                "$ref" => self.reference(rule, value, at)?,
                "type" => check_type(rule, value, at)?,
                "enum" => {
                    let options = rule.as_array().ok_or_else(|| unsupported("`enum` that is not a list"))?;
                    if !options.contains(value) {
                        return Err(invalid(at, format!("{} is not one of {rule}", short(value))));
                    }
                }
                "const" if rule != value => {
                    return Err(invalid(at, format!("expected {rule}, found {}", short(value))));
                }
                "const" => {}
                "properties"
                | "required"
                | "additionalProperties"
                | "minProperties"
                | "maxProperties"
                | "propertyNames" => self.object(keyword, rule, keywords, value, at)?,
                "items" | "prefixItems" | "minItems" | "maxItems" | "uniqueItems" => {
                    self.array(keyword, rule, keywords, value, at)?;
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
                    number(keyword, rule, value, at)?;
                }
                "minLength" | "maxLength" => length(keyword, rule, value, at)?,
                "anyOf" | "oneOf" | "allOf" => self.combine(keyword, rule, value, at)?,
                "not" => {
                    if self.check(rule, value, at).is_ok() {
                        return Err(invalid(at, "matches a schema it must not"));
                    }
                }
                other => return Err(unsupported(&format!("keyword `{other}`"))),
            }
        }
        Ok(())
    }

    fn reference(&mut self, rule: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
        let pointer = rule
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .ok_or_else(|| unsupported(&format!("`$ref` {rule} outside the document")))?;
        let target = self.root.pointer(pointer).ok_or_else(|| unsupported(&format!("`$ref` {rule} not found")))?;
        if self.depth >= MAX_DEPTH {
            return Err(unsupported("`$ref`s nested deeper than 256"));
        }
        self.depth += 1;
        let checked = self.check(target, value, at);
        self.depth -= 1;
        checked
    }

    fn object(
        &mut self,
        keyword: &str,
        rule: &Value,
        keywords: &Map<String, Value>,
        value: &Value,
        at: &str,
    ) -> Result<(), SchemaError> {
        let Value::Object(fields) = value else { return Ok(()) };
        match keyword {
            "properties" => {
                let properties = rule.as_object().ok_or_else(|| unsupported("`properties` that is not an object"))?;
                for (name, schema) in properties {
                    if let Some(field) = fields.get(name) {
                        self.check(schema, field, &push(at, name))?;
                    }
                }
            }
            "required" => {
                for name in rule.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if !fields.contains_key(name) {
                        return Err(invalid(at, format!("missing field `{}`", bounded(name))));
                    }
                }
            }
            "additionalProperties" => {
                let declared = keywords.get("properties").and_then(Value::as_object);
                for (name, field) in fields {
                    if !declared.is_some_and(|d| d.contains_key(name)) {
                        if rule == &Value::Bool(false) {
                            return Err(invalid(at, format!("unknown field `{}`", bounded(name))));
                        }
                        self.check(rule, field, &push(at, name))?;
                    }
                }
            }
            "propertyNames" => {
                for name in fields.keys() {
                    self.check(rule, &Value::String(name.clone()), &push(at, name))?;
                }
            }
            _ => {
                let bound = rule.as_u64().ok_or_else(|| unsupported(&format!("`{keyword}` {rule}")))?;
                let n = fields.len() as u64;
                if (keyword == "minProperties" && n < bound) || (keyword == "maxProperties" && n > bound) {
                    return Err(invalid(at, format!("{n} fields, `{keyword}` is {bound}")));
                }
            }
        }
        Ok(())
    }

    fn array(
        &mut self,
        keyword: &str,
        rule: &Value,
        keywords: &Map<String, Value>,
        value: &Value,
        at: &str,
    ) -> Result<(), SchemaError> {
        let Value::Array(items) = value else { return Ok(()) };
        match keyword {
            "prefixItems" => {
                let schemas = rule.as_array().ok_or_else(|| unsupported("`prefixItems` that is not a list"))?;
                for (i, (schema, item)) in schemas.iter().zip(items).enumerate() {
                    self.check(schema, item, &push(at, &i.to_string()))?;
                }
            }
            // Draft 7's tuple form (a list) checks by position, as `prefixItems` does.
            "items" if rule.is_array() => return self.array("prefixItems", rule, keywords, value, at),
            "items" => {
                let skip = keywords.get("prefixItems").and_then(Value::as_array).map_or(0, Vec::len);
                for (i, item) in items.iter().enumerate().skip(skip) {
                    self.check(rule, item, &push(at, &i.to_string()))?;
                }
            }
            "uniqueItems" => {
                if rule == &Value::Bool(true) {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i].contains(item) {
                            return Err(invalid(at, format!("item {i} repeats an earlier one")));
                        }
                    }
                }
            }
            _ => {
                let bound = rule.as_u64().ok_or_else(|| unsupported(&format!("`{keyword}` {rule}")))?;
                let n = items.len() as u64;
                if (keyword == "minItems" && n < bound) || (keyword == "maxItems" && n > bound) {
                    return Err(invalid(at, format!("{n} items, `{keyword}` is {bound}")));
                }
            }
        }
        Ok(())
    }

    fn combine(&mut self, keyword: &str, rule: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
        let schemas = rule.as_array().ok_or_else(|| unsupported(&format!("`{keyword}` that is not a list")))?;
        let mut matched = 0;
        let mut first_failure = None;
        for schema in schemas {
            match self.check(schema, value, at) {
                Ok(()) => matched += 1,
                Err(e @ SchemaError::Unsupported(_)) => return Err(e),
                Err(e) if keyword == "allOf" => return Err(e),
                Err(e) => {
                    first_failure.get_or_insert(e);
                }
            }
        }
        match keyword {
            "anyOf" | "oneOf" if matched == 0 => Err(invalid(
                at,
                format!(
                    "matches none of the {} alternatives{}",
                    schemas.len(),
                    first_failure.map(|e| format!(" (the first: {e})")).unwrap_or_default()
                ),
            )),
            "oneOf" if matched > 1 => Err(invalid(at, format!("matches {matched} alternatives of `oneOf`, not one"))),
            _ => Ok(()),
        }
    }
}

fn unsupported(what: &str) -> SchemaError {
    SchemaError::Unsupported(what.to_owned())
}

fn check_type(rule: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
    let names: Vec<&str> = match rule {
        Value::String(name) => vec![name.as_str()],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        other => return Err(unsupported(&format!("`type` {other}"))),
    };
    if names.iter().any(|name| is_type(value, name)) {
        Ok(())
    } else {
        Err(invalid(at, format!("expected {}, found {}", names.join(" or "), type_name(value))))
    }
}

fn number(keyword: &str, rule: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
    let Some(n) = value.as_f64() else { return Ok(()) };
    let bound = rule.as_f64().ok_or_else(|| unsupported(&format!("`{keyword}` {rule}")))?;
    let fine = match keyword {
        "minimum" => n >= bound,
        "maximum" => n <= bound,
        "exclusiveMinimum" => n > bound,
        "exclusiveMaximum" => n < bound,
        _ => bound != 0.0 && (n / bound).fract() == 0.0,
    };
    if fine { Ok(()) } else { Err(invalid(at, format!("{n} breaks `{keyword}` {bound}"))) }
}

fn length(keyword: &str, rule: &Value, value: &Value, at: &str) -> Result<(), SchemaError> {
    let Value::String(s) = value else { return Ok(()) };
    let bound = rule.as_u64().ok_or_else(|| unsupported(&format!("`{keyword}` {rule}")))?;
    let n = s.chars().count() as u64;
    if (keyword == "minLength" && n < bound) || (keyword == "maxLength" && n > bound) {
        return Err(invalid(at, format!("{n} characters, `{keyword}` is {bound}")));
    }
    Ok(())
}

/// A value for a message: its type and, when short, itself.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 40 { text } else { type_name(value).to_owned() }
}

/// A name from a payload for a message: at most 64 characters.
fn bounded(name: &str) -> String {
    if name.chars().count() <= 64 {
        name.to_owned()
    } else {
        format!("{}…", name.chars().take(64).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn why(schema: &Value, value: &Value) -> String {
        match validate(schema, value) {
            Err(SchemaError::Invalid(why)) => why,
            other => panic!("{value} against {schema}: {other:?}"),
        }
    }

    /// What schemars 1 writes for a struct with an optional field, a nested type, a list and
    /// an enum of unit variants.
    fn payment() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Payment",
            "type": "object",
            "properties": {
                "id": {"type": "integer", "format": "uint64", "minimum": 0},
                "note": {"type": ["string", "null"]},
                "amount": {"$ref": "#/$defs/Amount"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "kind": {"oneOf": [{"type": "string", "const": "card"}, {"type": "string", "enum": ["cash", "wire"]}]}
            },
            "required": ["id", "amount"],
            "additionalProperties": false,
            "$defs": {"Amount": {"type": "object", "properties": {"cents": {"type": "integer"}}, "required": ["cents"]}}
        })
    }

    #[test]
    fn accepts_what_the_type_decodes() {
        let ok = json!({"id": 7, "note": null, "amount": {"cents": 5}, "tags": ["a", "b"], "kind": "wire"});
        assert_eq!(validate(&payment(), &ok), Ok(()));
        assert_eq!(validate(&payment(), &json!({"id": 7, "amount": {"cents": 5}})), Ok(()));
    }

    #[test]
    fn says_where_and_why_it_does_not() {
        let s = payment();
        assert_eq!(why(&s, &json!({"amount": {"cents": 5}})), "/: missing field `id`");
        assert_eq!(why(&s, &json!({"id": -1, "amount": {"cents": 5}})), "/id: -1 breaks `minimum` 0");
        assert_eq!(
            why(&s, &json!({"id": 1, "amount": {"cents": "5"}})),
            "/amount/cents: expected integer, found string"
        );
        assert_eq!(why(&s, &json!({"id": 1, "amount": {}})).as_str(), "/amount: missing field `cents`");
        assert_eq!(why(&s, &json!({"id": 1, "amount": {"cents": 1}, "x/y": 1})), "/: unknown field `x/y`");
        assert_eq!(
            why(&s, &json!({"id": 1, "amount": {"cents": 1}, "tags": ["a", "a"]})),
            "/tags: item 1 repeats an earlier one"
        );
        let kind = why(&s, &json!({"id": 1, "amount": {"cents": 1}, "kind": "gold"}));
        assert!(
            kind.starts_with("/kind: matches none of the 2 alternatives (the first: /kind: expected \"card\""),
            "{kind}"
        );
        assert_eq!(
            why(&json!({"type": "array", "prefixItems": [{"type": "string"}]}), &json!([1])),
            "/0: expected string, found integer"
        );
    }

    #[test]
    fn refuses_what_it_does_not_check() {
        for schema in [
            json!({"pattern": "^a"}),
            json!({"$ref": "https://example.com/s.json"}),
            json!({"$ref": "#/$defs/Gone"}),
            json!(3),
        ] {
            assert!(matches!(validate(&schema, &json!("a")), Err(SchemaError::Unsupported(_))), "{schema}");
        }
        let nested = json!({"anyOf": [{"type": "integer"}, {"type": "string", "if": {}}]});
        assert!(matches!(validate(&nested, &json!("a")), Err(SchemaError::Unsupported(_))), "inside a combinator too");
    }

    #[test]
    fn a_recursive_schema_on_a_deep_payload_stops() {
        let schema = json!({"$ref": "#", "type": "array"});
        assert!(matches!(validate(&schema, &json!([])), Err(SchemaError::Unsupported(_))), "a `$ref` to itself");
    }
}

/// Against what schemars 1 really derives for typical event types: every payload the type
/// serializes to is valid, and payloads serde refuses to decode are invalid.
#[cfg(all(test, feature = "schemars"))]
mod derived {
    use std::collections::BTreeMap;

    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Amount {
        cents: i64,
        currency: Currency,
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    enum Currency {
        #[serde(rename = "EUR")]
        Eur,
        #[serde(rename = "USD")]
        Usd,
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    enum Method {
        Cash,
        Card { last4: String, expires: Option<u16> },
        Wire(String),
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Source {
        Web { session: String },
        Batch { file: String, line: u32 },
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Payment {
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

    fn schema() -> Value {
        schemars::schema_for!(Payment).to_value()
    }

    fn payment(method: Method, source: Source) -> Value {
        let amount = || Amount { cents: -250, currency: Currency::Usd };
        serde_json::to_value(Payment {
            id: u64::MAX,
            attempt: -3,
            ratio: 0.5,
            note: None,
            refund_of: Some(Box::new(amount())),
            amount: amount(),
            lines: vec![amount(), Amount { cents: 0, currency: Currency::Eur }],
            method,
            source,
            labels: BTreeMap::from([("a".to_owned(), 255)]),
            flagged: true,
        })
        .unwrap()
    }

    fn decodes(value: &Value) -> bool {
        serde_json::from_value::<Payment>(value.clone()).is_ok()
    }

    #[test]
    fn what_the_type_serializes_to_is_valid() {
        let schema = schema();
        let card = Method::Card { last4: "4242".to_owned(), expires: Some(2030) };
        let web = || Source::Web { session: "s".to_owned() };
        for value in [
            payment(Method::Cash, web()),
            payment(card, Source::Batch { file: "f.csv".to_owned(), line: 9 }),
            payment(Method::Wire("IBAN".to_owned()), web()),
        ] {
            assert!(decodes(&value));
            assert_eq!(validate(&schema, &value), Ok(()), "{value}");
        }
        let mut lean = payment(Method::Cash, web());
        let fields = lean.as_object_mut().unwrap();
        fields.remove("flagged");
        fields.remove("note");
        assert!(decodes(&lean));
        assert_eq!(validate(&schema, &lean), Ok(()), "optional and defaulted fields may be missing");
    }

    #[test]
    fn what_serde_refuses_is_invalid() {
        let schema = schema();
        let good = payment(Method::Cash, Source::Web { session: "s".to_owned() });
        let with = |pointer: &str, new: Value| {
            let mut value = good.clone();
            *value.pointer_mut(pointer).unwrap() = new;
            value
        };
        let mut unknown = good.clone();
        unknown["surprise"] = json!(1);
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("amount");
        for bad in [
            with("/id", json!(-1)),
            with("/id", json!("1")),
            with("/attempt", json!(1.5)),
            with("/amount/currency", json!("GBP")),
            with("/lines/1/cents", json!(null)),
            with("/refund_of", json!({"cents": 1})),
            with("/method", json!("Cheque")),
            with("/method", json!({"Card": {"last4": 4242}})),
            with("/source", json!({"kind": "mail", "session": "s"})),
            with("/source", json!({"kind": "batch", "file": "f.csv"})),
            with("/labels/a", json!(256)),
            unknown,
            missing,
        ] {
            assert!(!decodes(&bad), "serde decodes {bad}");
            assert!(
                matches!(validate(&schema, &bad), Err(SchemaError::Invalid(_))),
                "{bad}: {:?}",
                validate(&schema, &bad)
            );
        }
    }

    /// An integer-keyed map (`HashMap<u32, _>`): schemars writes `patternProperties` beside
    /// `"additionalProperties": false`. The map cannot be checked here, so it is refused as
    /// unchecked, not called invalid because `additionalProperties` came first.
    #[test]
    fn an_unsupported_keyword_is_refused_before_another_judges_the_value() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "patternProperties": {"^\\d+$": {"type": "integer"}}
        });
        assert!(matches!(validate(&schema, &json!({"3": 1})), Err(SchemaError::Unsupported(_))));
    }
}
