//! Redaction: what an operator sees of a payload's sensitive fields, and of the error texts
//! that echo them.
//!
//! An event type names its sensitive fields as JSON pointers,
//! `#[dead_letter(event_type = "payment", redact = ["/card/number", "/customer/email"])]`.
//! Every operator surface (the `dlq` command line, human and `--json`; the console's pages and
//! its JSON API) shows such a payload with the value at each pointer replaced by [`MASK`],
//! keeping the document's shape, and shows the row's error reason, chain, stack trace, its
//! attempts' reasons and its failure group's sample reason with each redacted value's text
//! replaced by [`MASK`] too ([`Secrets::scrub`]): an error message often quotes the field
//! that made it fail. The row in the store is not changed: the handler and the retrier see
//! the whole payload, and an operator allowed to may reveal it, audited
//! (`Admin::reveal`).
//!
//! ```
//! use dlq_core::redact;
//!
//! let mut payload = serde_json::json!({"id": 7, "card": {"number": "4111111111111111", "exp": "12/30"}});
//! let secrets = redact::mask(&mut payload, &["/card/number"]);
//! assert_eq!(payload, serde_json::json!({"id": 7, "card": {"number": "[redacted]", "exp": "12/30"}}));
//! assert_eq!(secrets.scrub("card 4111111111111111 declined"), "card [redacted] declined");
//! ```
//!
//! What redaction is for: an operator without the reveal right, screenshots and pasted
//! output, the console's logs. It does not protect the store (use `encrypt = true`): the
//! rows hold the cleartext, and anyone with SQL access reads it.

use std::borrow::Cow;

use serde_json::Value;

use crate::record::Payload;

/// The option's place in a handler's registration: the one field `redact` of
/// [`Registration`](crate::handlers::Registration), read here and written by the attribute's
/// expansion through [`registered`].
impl crate::handler::Registration {
    /// The attribute's `redact = ["/card/number"]`: the JSON pointers of the payload's fields
    /// operators see masked ([`crate::redact`]).
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-registration-redact", redact = ["/card/number"])]
    /// async fn handle(payment: serde_json::Value) -> Result<(), std::io::Error> { let _ = payment; Ok(()) }
    ///
    /// assert_eq!(<handle as dlq_core::handlers::Handler>::registration().redact(), ["/card/number"]);
    /// ```
    pub const fn redact(&self) -> &'static [&'static str] {
        self.redact
    }
}

/// What `#[dead_letter(redact = [...])]` expands to: `reg` with its payload's fields at
/// `pointers` shown masked to operators.
#[doc(hidden)]
pub const fn registered(
    mut reg: crate::handler::Registration,
    pointers: &'static [&'static str],
) -> crate::handler::Registration {
    reg.redact = pointers;
    reg
}

/// What an operator is shown in place of a redacted value.
pub const MASK: &str = "[redacted]";

/// A redacted value shorter than this many characters is masked in the payload but not
/// scrubbed out of texts: `"12"` or `true` would mask every `12` of a message and say
/// nothing worth hiding.
pub const MIN_SCRUBBED_CHARS: usize = 4;

/// At most this many distinct values are scrubbed out of texts (the longest first): scrubbing
/// costs the text's length once per value, and a pointer to an array of thousands of values
/// must not make a page slow. The payload itself is masked whole whatever its size.
pub const MAX_SECRETS: usize = 1024;

/// The text of the values found at a payload's redacted fields, longest first, to scrub out
/// of the texts shown beside it ([`mask`] returns them).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: a Debug print of a row's view must not undo its redaction.
        f.debug_struct("Secrets").field("count", &self.0.len()).finish()
    }
}

impl Secrets {
    /// `text` with each secret's occurrences replaced by [`MASK`] (the longest secret first,
    /// so a value holding another is masked whole).
    ///
    /// ```
    /// let mut payload = serde_json::json!({"email": "alice@example.com", "pin": 1234, "cvv": "12"});
    /// let secrets = dlq_core::redact::mask(&mut payload, &["/email", "/pin", "/cvv"]);
    /// assert_eq!(
    ///     secrets.scrub("no user alice@example.com (pin 1234, cvv 12)"),
    ///     "no user [redacted] (pin [redacted], cvv 12)",
    ///     "a value of fewer than four characters is masked in the payload only"
    /// );
    /// ```
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        out
    }

    /// Whether nothing is to be scrubbed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `text` (and its JSON-escaped form, as a `Debug` print or a JSON document quotes
    /// it) when it is long enough to scrub.
    fn add(&mut self, text: &str) {
        if text.chars().count() < MIN_SCRUBBED_CHARS {
            return;
        }
        let escaped = serde_json::to_string(text).unwrap_or_default();
        let escaped = escaped.get(1..escaped.len().saturating_sub(1)).unwrap_or_default();
        for form in [text, escaped] {
            if form.chars().count() >= MIN_SCRUBBED_CHARS && !self.0.iter().any(|s| s == form) {
                self.0.push(form.to_owned());
            }
        }
    }

    /// Every scalar under `value` (a whole object or array at a pointer is secret).
    fn collect(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.add(s),
            Value::Number(n) => self.add(&n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| self.collect(v)),
            Value::Object(fields) => fields.values().for_each(|v| self.collect(v)),
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// Longest first, at most [`MAX_SECRETS`].
    fn finish(mut self) -> Self {
        self.0.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.0.truncate(MAX_SECRETS);
        self
    }
}

/// Replaces the value at each of `pointers` (RFC 6901: `~1` is `/`, `~0` is `~`; an array
/// element by its index, `/items/0/pan`) in `value` by [`MASK`], keeping the rest of the
/// document, and returns the values' texts to [`scrub`](Secrets::scrub) from the texts shown
/// beside it. A pointer to an object or an array masks it whole; a pointer that finds nothing
/// masks nothing.
///
/// ```
/// let mut doc = serde_json::json!({"a/b": {"~k": 4111111111111111_u64}, "items": [{"pan": "5500005555555559"}]});
/// let secrets = dlq_core::redact::mask(&mut doc, &["/a~1b/~0k", "/items/0", "/absent"]);
/// assert_eq!(doc, serde_json::json!({"a/b": {"~k": "[redacted]"}, "items": ["[redacted]"]}));
/// assert_eq!(secrets.scrub("4111111111111111 then 5500005555555559"), "[redacted] then [redacted]");
/// ```
pub fn mask<P: AsRef<str>>(value: &mut Value, pointers: &[P]) -> Secrets {
    let mut secrets = Secrets::default();
    for pointer in pointers {
        if let Some(found) = value.pointer_mut(pointer.as_ref()) {
            if found.as_str() == Some(MASK) {
                continue;
            }
            secrets.collect(found);
            *found = Value::String(MASK.to_owned());
        }
    }
    secrets.finish()
}

/// The texts [`mask`] would return for `value`, read without copying or changing it.
fn secrets_of<P: AsRef<str>>(value: &Value, pointers: &[P]) -> Secrets {
    let mut secrets = Secrets::default();
    for found in pointers.iter().filter_map(|pointer| value.pointer(pointer.as_ref())) {
        if found.as_str() != Some(MASK) {
            secrets.collect(found);
        }
    }
    secrets.finish()
}

/// A payload as an operator without the reveal right sees it when its type redacts
/// `pointers`: [`mask`]ed when it is JSON; a payload that is not JSON (bytes parked as they
/// came) cannot be masked field by field, so it is shown as [`MASK`] whole. With no pointer,
/// the payload as it is.
///
/// ```
/// use dlq_core::{Payload, redact};
/// let (shown, secrets) = redact::payload(&Payload::from_bytes(br#"{"pan": "4111111111111111"#), &["/pan"]);
/// assert_eq!(shown, Payload::Json(serde_json::json!("[redacted]")));
/// assert!(secrets.is_empty());
/// ```
pub fn payload<P: AsRef<str>>(payload: &Payload, pointers: &[P]) -> (Payload, Secrets) {
    if pointers.is_empty() {
        return (payload.clone(), Secrets::default());
    }
    match payload {
        Payload::Json(value) => {
            let mut value = value.clone();
            let secrets = mask(&mut value, pointers);
            (Payload::Json(value), secrets)
        }
        Payload::Raw { .. } => (Payload::Json(Value::String(MASK.to_owned())), Secrets::default()),
    }
}

/// Why `pointer` cannot name a field to redact (`None` when it can): it must start with `/`
/// and its escapes must be `~0` or `~1`.
///
/// ```
/// assert_eq!(dlq_core::redact::pointer_error("/card/number"), None);
/// assert!(dlq_core::redact::pointer_error("card").is_some());
/// assert!(dlq_core::redact::pointer_error("/a~2").is_some());
/// ```
pub fn pointer_error(pointer: &str) -> Option<&'static str> {
    if !pointer.starts_with('/') {
        return Some("a JSON pointer to a field starts with `/`, like \"/card/number\"");
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some("`~` in a JSON pointer must be `~0` (for `~`) or `~1` (for `/`)");
        }
    }
    None
}

/// Which fields of which event types an operator sees masked: built from the service's
/// handlers ([`Policy::from_registry`], what an `Admin` with a registry
/// uses) or by hand ([`Policy::redact`]).
///
/// ```
/// use dlq_core::{DeadLetter, ErrorClass, classify::FailureInfo, Payload, redact::Policy};
///
/// let policy = Policy::default().redact("payment", ["/card/number"]);
/// let failure = FailureInfo::new(ErrorClass::Permanent, "Declined", "card 4111111111111111 declined".into(), vec![], None);
/// let payload = Payload::Json(serde_json::json!({"id": 7, "card": {"number": "4111111111111111"}}));
/// let mut row = DeadLetter::new(7, "payment", payload, failure, chrono::Utc::now());
/// policy.letter(&mut row);
/// assert_eq!(row.payload, Payload::Json(serde_json::json!({"id": 7, "card": {"number": "[redacted]"}})));
/// assert_eq!(row.failure.reason, "card [redacted] declined");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    types: std::collections::BTreeMap<String, Vec<String>>,
}

impl Policy {
    /// The same policy, masking `pointers` (JSON pointers) of `event_type`'s payloads too.
    #[must_use]
    pub fn redact<P: Into<String>>(
        mut self,
        event_type: impl Into<String>,
        pointers: impl IntoIterator<Item = P>,
    ) -> Self {
        let slot = self.types.entry(event_type.into()).or_default();
        for pointer in pointers {
            let pointer = pointer.into();
            if !slot.contains(&pointer) {
                slot.push(pointer);
            }
        }
        self
    }

    /// The redaction of every handler in `registry` (each `#[dead_letter(redact = [...])]`).
    pub fn from_registry(registry: &crate::registry::Registry) -> Self {
        registry
            .iter()
            .fold(Self::default(), |policy, reg| policy.redact(reg.event_type(), reg.redact().iter().copied()))
    }

    /// The redaction the store's type catalog records (each type's `redact`, as its handlers
    /// published it: [`crate::catalog`]).
    pub fn from_catalog(records: &[crate::catalog::EventTypeInfo]) -> Self {
        records
            .iter()
            .fold(Self::default(), |policy, info| policy.redact(info.event_type.clone(), info.redact.iter().cloned()))
    }

    /// Both policies: a type masks the fields either names.
    #[must_use]
    pub fn merge(self, other: Self) -> Self {
        other.types.into_iter().fold(self, |policy, (event_type, pointers)| policy.redact(event_type, pointers))
    }

    /// The pointers redacted in `event_type`'s payloads (empty: nothing is masked).
    pub fn pointers(&self, event_type: &str) -> &[String] {
        self.types.get(event_type).map_or(&[], Vec::as_slice)
    }

    /// Whether no type redacts anything.
    pub fn is_empty(&self) -> bool {
        self.types.values().all(Vec::is_empty)
    }

    /// `letter` as an operator sees it: its payload masked, its error's reason, chain and
    /// stack trace scrubbed of the masked values; the values found, to scrub its other texts.
    /// A sealed payload keeps its envelope (no one sees inside it without the key); the fields
    /// it keeps in clear are masked when they are redacted.
    pub fn letter(&self, letter: &mut crate::DeadLetter) -> Secrets {
        let pointers = self.pointers(&letter.event_type);
        if pointers.is_empty() {
            return Secrets::default();
        }
        let secrets = if crate::sealed::sealed_key(&letter.payload).is_some() {
            mask_clear_fields(&mut letter.payload, pointers)
        } else {
            let (shown, secrets) = payload(&letter.payload, pointers);
            letter.payload = shown;
            secrets
        };
        scrub_failure(&secrets, &mut letter.failure);
        secrets
    }

    /// `detail` as an operator sees it: the row as [`letter`](Self::letter) shows it, its
    /// attempts' reasons scrubbed, and each audit entry's payloads (a patch's before and
    /// after) masked, the values a patch wrote at a redacted field masked, and every text
    /// scrubbed.
    pub fn detail(&self, detail: &mut crate::record::Detail) -> Secrets {
        let pointers = self.pointers(&detail.letter.event_type).to_vec();
        if pointers.is_empty() {
            return Secrets::default();
        }
        let mut secrets = self.letter(&mut detail.letter);
        for entry in &mut detail.audit {
            secrets.extend(mask_diff(&mut entry.diff, &pointers));
        }
        let secrets = secrets.finish();
        for attempt in &mut detail.attempts {
            scrub_option(&secrets, &mut attempt.error_reason);
        }
        for entry in &mut detail.audit {
            scrub_option(&secrets, &mut entry.reason);
            scrub_value(&secrets, &mut entry.diff);
        }
        scrub_failure(&secrets, &mut detail.letter.failure);
        secrets
    }

    /// `text`, a message that may quote a row's payload (a validation error, a refusal, an
    /// audit reason), scrubbed of the values `event_type` redacts in each of `payloads` (the
    /// row's, and a patch's result): what every message that quotes stored text passes
    /// through before an operator reads it.
    ///
    /// ```
    /// use dlq_core::{Payload, redact::Policy};
    /// let policy = Policy::default().redact("payment", ["/pan"]);
    /// let stored = Payload::Json(serde_json::json!({"pan": "4111111111111111"}));
    /// let why = r#"invalid type: string "4111111111111111", expected u64"#;
    /// assert_eq!(policy.scrub("payment", &[&stored], why), r#"invalid type: string "[redacted]", expected u64"#);
    /// ```
    pub fn scrub<'a>(&self, event_type: &str, payloads: &[&Payload], text: &'a str) -> Cow<'a, str> {
        if self.pointers(event_type).is_empty() {
            return Cow::Borrowed(text);
        }
        let mut secrets = Secrets::default();
        for payload in payloads {
            secrets.extend(self.shown(event_type, payload).1);
        }
        let secrets = secrets.finish();
        Cow::Owned(secrets.scrub(text).into_owned())
    }

    /// `payload` of `event_type` as an operator sees it ([`payload`]).
    pub fn shown(&self, event_type: &str, payload: &Payload) -> (Payload, Secrets) {
        match self.pointers(event_type) {
            [] => (payload.clone(), Secrets::default()),
            pointers if crate::sealed::sealed_key(payload).is_some() => {
                let mut payload = payload.clone();
                let secrets = mask_clear_fields(&mut payload, pointers);
                (payload, secrets)
            }
            pointers => self::payload(payload, pointers),
        }
    }

    /// `new`, a payload an operator wrote from a masked one (an editor's, the console's edit
    /// form), with each redacted field still holding [`MASK`] given back its value in `old`,
    /// the stored payload: saving a masked document never writes the mask over the data.
    ///
    /// ```
    /// use dlq_core::{Payload, redact::Policy};
    /// let policy = Policy::default().redact("payment", ["/pan"]);
    /// let old = Payload::Json(serde_json::json!({"pan": "4111111111111111", "currency": "USD "}));
    /// let edited = Payload::Json(serde_json::json!({"pan": "[redacted]", "currency": "USD"}));
    /// assert_eq!(policy.unmask("payment", &old, edited), Payload::Json(serde_json::json!({"pan": "4111111111111111", "currency": "USD"})));
    /// ```
    pub fn unmask(&self, event_type: &str, old: &Payload, new: Payload) -> Payload {
        let (Payload::Json(old), Payload::Json(mut new)) = (old, new.clone()) else { return new };
        for pointer in self.pointers(event_type) {
            let (Some(kept), Some(slot)) = (old.pointer(pointer), new.pointer_mut(pointer)) else { continue };
            if slot.as_str() == Some(MASK) {
                *slot = kept.clone();
            }
        }
        Payload::Json(new)
    }

    /// The changes a patch would make to a row of `event_type` (`dlq patch --dry-run`), each
    /// value masked where a redacted field is.
    pub fn changes(&self, event_type: &str, changes: &mut [crate::record::Change]) {
        let pointers = self.pointers(event_type);
        if pointers.is_empty() {
            return;
        }
        for change in changes {
            for value in [&mut change.old, &mut change.new].into_iter().flatten() {
                mask_at(&change.path, value, pointers);
            }
        }
    }

    /// A failure group as an operator sees it: its sample reason scrubbed of the values of
    /// its sample row (`sample`, with its audit log: the values its patches replaced too);
    /// [`MASK`] whole when the sample row is gone (its values cannot be found) or is not JSON.
    pub fn group(&self, group: &mut crate::record::FailureGroup, sample: Option<&crate::record::Detail>) {
        if self.pointers(&group.event_type).is_empty() {
            return;
        }
        group.sample_reason = match sample {
            Some(sample) if matches!(sample.letter.payload, Payload::Json(_)) => {
                let secrets = self.detail(&mut sample.clone());
                secrets.scrub(&group.sample_reason).into_owned()
            }
            _ => MASK.to_owned(),
        };
    }
}

impl Secrets {
    fn extend(&mut self, other: Self) {
        for secret in other.0 {
            if !self.0.contains(&secret) {
                self.0.push(secret);
            }
        }
    }
}

/// A sealed payload's fields kept in clear (keyed by their pointer) masked when a redacted
/// pointer names them or holds them.
fn mask_clear_fields(payload: &mut Payload, pointers: &[String]) -> Secrets {
    let mut secrets = Secrets::default();
    let Payload::Json(Value::Object(outer)) = payload else { return secrets };
    let Some(Value::Object(clear)) = outer.get_mut("clear") else { return secrets };
    for (kept, value) in clear.iter_mut() {
        secrets.extend(mask_at(kept, value, pointers));
    }
    secrets.finish()
}

/// `value`, found at `path` of a payload, masked where `pointers` reach it: whole when a
/// pointer names `path` or a place holding it, at the pointers inside it otherwise.
fn mask_at(path: &str, value: &mut Value, pointers: &[String]) -> Secrets {
    if pointers.iter().any(|p| under(path, p)) {
        let mut secrets = Secrets::default();
        secrets.collect(value);
        *value = Value::String(MASK.to_owned());
        return secrets;
    }
    let inner: Vec<&str> =
        pointers.iter().filter_map(|p| p.strip_prefix(path)).filter(|rest| rest.starts_with('/')).collect();
    mask(value, &inner)
}

/// Whether `path` is `pointer` or a place inside it.
fn under(path: &str, pointer: &str) -> bool {
    path == pointer || path.strip_prefix(pointer).is_some_and(|rest| rest.starts_with('/'))
}

/// An audit entry's diff with its payloads (`payload.old`, `payload.new`) masked and the
/// values its patch (`patch`, RFC 6902) writes at or inside a redacted field masked.
fn mask_diff(diff: &mut Value, pointers: &[String]) -> Secrets {
    let mut secrets = Secrets::default();
    if let Some(payloads) = diff.get_mut("payload").and_then(Value::as_object_mut) {
        for side in ["old", "new"] {
            if let Some(value) = payloads.get_mut(side) {
                secrets.extend(mask(value, pointers));
            }
        }
        if payloads.contains_key("old_hex") {
            payloads.insert("old_hex".into(), Value::String(MASK.to_owned()));
        }
    }
    if let Some(ops) = diff.get_mut("patch").and_then(Value::as_array_mut) {
        for op in ops {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default().to_owned();
            if let Some(value) = op.get_mut("value") {
                secrets.extend(mask_at(&path, value, pointers));
            }
        }
    }
    secrets
}

fn scrub_failure(secrets: &Secrets, failure: &mut crate::classify::FailureInfo) {
    if secrets.is_empty() {
        return;
    }
    failure.reason = secrets.scrub(&failure.reason).into_owned();
    for link in &mut failure.chain {
        *link = secrets.scrub(link).into_owned();
    }
    scrub_option(secrets, &mut failure.stacktrace);
}

fn scrub_option(secrets: &Secrets, text: &mut Option<String>) {
    if let Some(text) = text {
        *text = secrets.scrub(text).into_owned();
    }
}

/// Every string in `value` scrubbed.
fn scrub_value(secrets: &Secrets, value: &mut Value) {
    match value {
        Value::String(text) => *text = secrets.scrub(text).into_owned(),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(secrets, v)),
        Value::Object(fields) => fields.values_mut().for_each(|v| scrub_value(secrets, v)),
        _ => {}
    }
}

/// What logs, spans and circuit reasons say of an encrypted type's failure text: nothing.
pub(crate) const ENCRYPTED_TEXT: &str = "[encrypted]";

/// What a handler's failure texts may say in this process's logs, spans and circuit reasons
/// (stored, shown by `dlq stats` and the console), worked out from the event before its
/// handler takes it: [`ENCRYPTED_TEXT`] for an encrypted type; for a type with `redact`, the
/// text scrubbed of the values at the redacted fields of the event (in clear), or [`MASK`]
/// whole when the event is not JSON (its values cannot be found); otherwise the text itself.
pub(crate) enum LogText {
    Encrypted,
    AsIs,
    Scrubbed(Secrets),
    Masked,
}

impl LogText {
    /// The rule for failures of `reg`'s handler run on `payload`.
    pub(crate) fn of(reg: &crate::handler::Registration, payload: &Payload) -> Self {
        if reg.sealing().is_some() {
            return Self::Encrypted;
        }
        let pointers = reg.redact();
        if pointers.is_empty() {
            return Self::AsIs;
        }
        match payload {
            // Read where it lies: this runs before every retry of the type, success or not.
            Payload::Json(value) => Self::Scrubbed(secrets_of(value, pointers)),
            Payload::Raw { .. } => Self::Masked,
        }
    }

    /// `text` as the rule lets it be said.
    pub(crate) fn say<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self {
            Self::Encrypted => Cow::Borrowed(ENCRYPTED_TEXT),
            Self::AsIs => Cow::Borrowed(text),
            Self::Scrubbed(secrets) => secrets.scrub(text),
            Self::Masked => Cow::Borrowed(MASK),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_read_in_place_are_those_mask_returns() {
        let doc = json!({"customer": {"email": "a@b.example", "cards": ["4111111111111111", {"pan": 5_500_005_555_555_559_u64}]}, "note": "[redacted]"});
        let pointers = ["/customer/cards", "/customer/email", "/customer/cards/1/pan", "/note", "/absent"];
        let mut masked = doc.clone();
        assert_eq!(secrets_of(&doc, &pointers), mask(&mut masked, &pointers));
    }

    #[test]
    fn masks_keep_the_structure_and_take_every_scalar_under_a_pointer() {
        let mut doc = json!({"customer": {"email": "a@b.example", "cards": ["4111111111111111", {"pan": 5_500_005_555_555_559_u64}]}, "id": 7});
        let secrets = mask(&mut doc, &["/customer/cards", "/customer/email"]);
        assert_eq!(doc, json!({"customer": {"email": MASK, "cards": MASK}, "id": 7}));
        let text = "pan 5500005555555559 / 4111111111111111 for a@b.example (id 7)";
        assert_eq!(secrets.scrub(text), "pan [redacted] / [redacted] for [redacted] (id 7)");
    }

    #[test]
    fn pointer_escapes_and_array_indexes() {
        let mut doc = json!({"a/b": 12345, "c~d": "secret-1", "list": ["x0000", "y0000"]});
        mask(&mut doc, &["/a~1b", "/c~0d", "/list/1", "/list/9", "/list/-", "nope", "/a~1b"]);
        assert_eq!(doc, json!({"a/b": MASK, "c~d": MASK, "list": ["x0000", MASK]}));
    }

    #[test]
    fn a_secret_quoted_by_debug_or_json_is_scrubbed_in_that_form_too() {
        let mut doc = json!({"note": "he said \"hi\"\n"});
        let secrets = mask(&mut doc, &["/note"]);
        let debugged = format!("bad note {:?}", "he said \"hi\"\n");
        assert_eq!(secrets.scrub(&debugged), "bad note \"[redacted]\"");
        assert_eq!(secrets.scrub("raw he said \"hi\"\n."), "raw [redacted].");
    }

    #[test]
    fn the_longest_secret_goes_first_and_short_values_stay_in_texts() {
        let mut doc = json!({"a": "4111", "b": "4111111111111111", "c": true, "d": null, "e": 7});
        let secrets = mask(&mut doc, &["/a", "/b", "/c", "/d", "/e"]);
        assert_eq!(doc, json!({"a": MASK, "b": MASK, "c": MASK, "d": MASK, "e": MASK}));
        assert_eq!(secrets.scrub("4111111111111111 and 4111 and 7 true"), "[redacted] and [redacted] and 7 true");
    }

    #[test]
    fn huge_values_and_many_values_are_bounded() {
        let huge = "9".repeat(1 << 16);
        let mut doc = json!({"big": huge, "many": (0..5_000).map(|n| format!("value-{n:05}")).collect::<Vec<_>>()});
        let secrets = mask(&mut doc, &["/big", "/many"]);
        assert_eq!(secrets.0.len(), MAX_SECRETS);
        assert_eq!(secrets.0[0].len(), 1 << 16, "the longest is kept");
        let text = format!("x{huge}y");
        assert_eq!(secrets.scrub(&text), "x[redacted]y");
    }

    #[test]
    fn the_mask_itself_is_not_a_secret_and_debug_names_no_value() {
        let mut doc = json!({"a": MASK, "b": "top-secret"});
        let secrets = mask(&mut doc, &["/a", "/b"]);
        assert_eq!(secrets.scrub("[redacted] stays"), "[redacted] stays");
        assert!(!format!("{secrets:?}").contains("top-secret"));
    }

    #[test]
    fn raw_payloads_are_masked_whole_and_no_pointer_is_no_change() {
        let raw = Payload::from_bytes(b"\xff pan=4111111111111111");
        assert_eq!(payload(&raw, &["/pan"]).0, Payload::Json(json!(MASK)));
        assert_eq!(payload::<&str>(&raw, &[]).0, raw);
    }

    #[test]
    fn pointer_errors() {
        for ok in ["/a", "/a~0b~1c", "/0", "/"] {
            assert_eq!(pointer_error(ok), None, "{ok}");
        }
        for bad in ["", "a", "/a~", "/a~2", "#/a"] {
            assert!(pointer_error(bad).is_some(), "{bad}");
        }
    }
}
