//! Parsing the arguments of `#[dead_letter(...)]`.
//!
//! Parsing goes in two steps: [`RawArgs`] reads each `key = value` on its own (a bad literal,
//! an unknown or duplicate key is recorded and parsing goes on with the next argument), then
//! [`RawArgs::build`] applies the rules between keys. Every error lands on the offending token
//! and all of them are reported together.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::parse::{Parse, ParseStream};
use syn::{Lit, LitBool, LitStr, Path, Token};

use crate::duration::{self, Millis};
use crate::errors::Errors;
use crate::options::{self, Room};

/// The attribute's name, as every message names it.
const ATTR: &str = "`#[dead_letter]`";

/// The keys parsed here, in the order the docs give them; the rooms' keys and `crate` follow.
const KEYS: &str = "event_type, version, upcast, max_retries, backoff, base, max, jitter, max_age, timeout, breaker, encrypt, clear, subject";

/// The per-type options with a room of their own ([`options`]): one line each.
pub(crate) const ROOMS: &[&dyn Room] = &[&options::redact::Redact];

/// Every valid key, in the order the docs give them.
fn keys() -> String {
    let rooms: Vec<&str> = ROOMS.iter().map(|room| room.key()).collect();
    format!("{KEYS}, {}, crate", rooms.join(", "))
}

/// The room of the key `input` starts with, if any.
fn room_at(input: ParseStream) -> Option<&'static dyn Room> {
    let key = input.fork().parse::<syn::Ident>().ok()?;
    ROOMS.iter().copied().find(|room| key == room.key())
}

mod kw {
    syn::custom_keyword!(event_type);
    syn::custom_keyword!(version);
    syn::custom_keyword!(upcast);
    syn::custom_keyword!(max_retries);
    syn::custom_keyword!(backoff);
    syn::custom_keyword!(base);
    syn::custom_keyword!(max);
    syn::custom_keyword!(jitter);
    syn::custom_keyword!(max_age);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(breaker);
    syn::custom_keyword!(encrypt);
    syn::custom_keyword!(clear);
    syn::custom_keyword!(subject);
}

/// The shape of a backoff schedule, as `backoff = "..."` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackoffKind {
    Exponential,
    Fixed,
    Linear,
    None,
}

impl BackoffKind {
    const CHOICES: &'static str = "\"exp\", \"fixed\", \"linear\" or \"none\"";

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "exp" => Some(Self::Exponential),
            "fixed" => Some(Self::Fixed),
            "linear" => Some(Self::Linear),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// One argument as written: the key token (duplicate and cross-key errors point at it), the
/// value's tokens (value errors point at them) and the value.
pub(crate) struct Arg<K, T> {
    key: K,
    tokens: TokenStream,
    pub(crate) value: T,
}

/// The arguments as written, each checked on its own.
#[derive(Default)]
pub(crate) struct RawArgs {
    event_type: Option<Arg<kw::event_type, LitStr>>,
    version: Option<Arg<kw::version, u32>>,
    upcast: Option<Arg<kw::upcast, Vec<Path>>>,
    max_retries: Option<Arg<kw::max_retries, u32>>,
    backoff: Option<Arg<kw::backoff, BackoffKind>>,
    base: Option<Arg<kw::base, Millis>>,
    max: Option<Arg<kw::max, Millis>>,
    jitter: Option<Arg<kw::jitter, f64>>,
    max_age: Option<Arg<kw::max_age, Millis>>,
    timeout: Option<Arg<kw::timeout, Millis>>,
    breaker: Option<Arg<kw::breaker, LitStr>>,
    encrypt: Option<Arg<kw::encrypt, LitBool>>,
    clear: Option<Arg<kw::clear, Vec<LitStr>>>,
    subject: Option<Arg<kw::subject, LitStr>>,
    /// The rooms' keys as written, each with the value its room read.
    rooms: Vec<(&'static dyn Room, Arg<syn::Ident, TokenStream>)>,
    krate: Option<Arg<Token![crate], Path>>,
    progress: Progress,
}

/// What parsing has met so far.
#[derive(Default)]
struct Progress {
    /// The keys, valid values or not.
    seen: Vec<&'static str>,
    /// The errors; parsing goes on past them.
    errors: Errors,
}

/// The checked arguments, ready to generate code from.
pub(crate) struct Args {
    pub(crate) event_type: LitStr,
    /// The version of the event's contract, 1 unless `version = N` says otherwise.
    pub(crate) version: u32,
    /// The upcasters from version 1, one per version before `version`.
    pub(crate) upcast: Vec<Path>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) backoff: Option<BackoffKind>,
    pub(crate) base: Option<Millis>,
    pub(crate) max: Option<Millis>,
    pub(crate) jitter: Option<f64>,
    pub(crate) max_age: Option<Millis>,
    pub(crate) timeout: Option<Millis>,
    /// The circuit-breaker rule, checked with the parser the runtime uses.
    pub(crate) breaker: Option<LitStr>,
    /// `encrypt = true`: the events are sealed at rest.
    pub(crate) encrypt: bool,
    /// The JSON pointers of the payload fields kept in clear beside the ciphertext.
    pub(crate) clear: Vec<LitStr>,
    /// The JSON pointer to the payload's subject (erasure by subject).
    pub(crate) subject: Option<LitStr>,
    /// The per-type options with a room of their own, each with its value read.
    pub(crate) rooms: Vec<(&'static dyn Room, TokenStream)>,
    /// The path of `dlq_core`, `::dlq_core` unless `crate = "..."` says otherwise.
    pub(crate) krate: TokenStream,
}

// The accepted grammar:
//
//   args  := (arg ("," arg)* ","?)?
//   arg   := "event_type"  "=" STRING      non-empty, no surrounding whitespace
//          | "version"     "=" INTEGER     1 ..= u32::MAX
//          | "upcast"      "=" "[" PATH ("," PATH)* ","? "]"
//                                          `version - 1` functions, from version 1 up
//          | "max_retries" "=" INTEGER     0 ..= u32::MAX
//          | "backoff"     "=" STRING      "exp" | "fixed" | "linear" | "none"
//          | "base"        "=" DURATION
//          | "max"         "=" DURATION
//          | "jitter"      "=" FLOAT       0.0 ..= 1.0
//          | "max_age"     "=" DURATION
//          | "timeout"     "=" DURATION
//          | "breaker"     "=" STRING      a rule `dlq_breaker_rule::parse` reads, with a window
//                                          longer than zero: "50% of 20 in 1m"
//          | "encrypt"     "=" BOOL        seal the payload and the error's text at rest
//          | "clear"       "=" "[" STRING ("," STRING)* ","? "]"
//                                          JSON pointers ("/id") kept readable; needs `encrypt = true`
//          | "subject"     "=" STRING      an RFC 6901 JSON pointer to a field: "/customer_id"
//          | ROOM          "=" ...         a key of `ROOMS`, its value read by its room
//          | "crate"       "=" STRING      a path, like "::dlq_core"
//   DURATION := STRING that `humantime::parse_duration` reads (numbers with units, added up),
//               a whole number of milliseconds, longer than zero: "250ms", "30s", "1h 30m", "7d"
impl Parse for RawArgs {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Self::default();
        let errors = &mut args.progress;
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::event_type) {
                parse_arg(input, "event_type", &mut args.event_type, event_type, errors)?;
            } else if lookahead.peek(kw::version) {
                parse_arg(input, "version", &mut args.version, version, errors)?;
            } else if lookahead.peek(kw::upcast) {
                parse_upcast(input, &mut args.upcast, errors)?;
            } else if lookahead.peek(kw::max_retries) {
                parse_arg(input, "max_retries", &mut args.max_retries, max_retries, errors)?;
            } else if lookahead.peek(kw::backoff) {
                parse_arg(input, "backoff", &mut args.backoff, backoff, errors)?;
            } else if lookahead.peek(kw::base) {
                parse_arg(input, "base", &mut args.base, duration_value, errors)?;
            } else if lookahead.peek(kw::max) {
                parse_arg(input, "max", &mut args.max, duration_value, errors)?;
            } else if lookahead.peek(kw::jitter) {
                parse_arg(input, "jitter", &mut args.jitter, jitter, errors)?;
            } else if lookahead.peek(kw::max_age) {
                parse_arg(input, "max_age", &mut args.max_age, duration_value, errors)?;
            } else if lookahead.peek(kw::timeout) {
                parse_arg(input, "timeout", &mut args.timeout, duration_value, errors)?;
            } else if lookahead.peek(kw::breaker) {
                parse_arg(input, "breaker", &mut args.breaker, breaker, errors)?;
            } else if lookahead.peek(kw::encrypt) {
                parse_arg(input, "encrypt", &mut args.encrypt, boolean, errors)?;
            } else if lookahead.peek(kw::clear) {
                parse_value(input, "clear", &mut args.clear, |t| pointers("clear", t), errors)?;
            } else if lookahead.peek(kw::subject) {
                parse_arg(input, "subject", &mut args.subject, subject, errors)?;
            } else if let Some(room) = room_at(input) {
                let mut slot = None;
                parse_value(input, room.key(), &mut slot, |t| room.read(t), errors)?;
                args.rooms.extend(slot.map(|arg| (room, arg)));
            } else if lookahead.peek(Token![crate]) {
                parse_arg(input, "crate", &mut args.krate, crate_path, errors)?;
            } else {
                let unknown = skip_arg(input);
                errors.errors.push(unknown_key(&unknown));
            }
            if !input.is_empty() {
                // `skip_arg` stops at a comma or at the end: this cannot fail.
                input.parse::<Token![,]>()?;
            }
        }
        Ok(args)
    }
}

/// Parses one `key = value` into `slot`.
///
/// The one place keys are stored: a repeated key is reported on its second occurrence, a
/// value that `convert` rejects on the value, and either way parsing goes on.
fn parse_arg<K: Parse + ToTokens, T>(
    input: ParseStream,
    name: &'static str,
    slot: &mut Option<Arg<K, T>>,
    convert: fn(&str, &Lit) -> syn::Result<T>,
    progress: &mut Progress,
) -> syn::Result<()> {
    // Errors about the value point at all of it: syn's span of `-1` covers only the `-`.
    let value = |tokens: &TokenStream| match syn::parse2::<Lit>(tokens.clone()) {
        Ok(lit) => convert(name, &lit).map_err(|err| syn::Error::new_spanned(tokens, err)),
        Err(_) => Err(expected_literal(name, tokens)),
    };
    parse_value(input, name, slot, value, progress)
}

/// Parses one `key = value` into `slot`, the value's tokens read by `convert`.
fn parse_value<K: Parse + ToTokens, T>(
    input: ParseStream,
    name: &'static str,
    slot: &mut Option<Arg<K, T>>,
    convert: impl FnOnce(&TokenStream) -> syn::Result<T>,
    Progress { seen, errors }: &mut Progress,
) -> syn::Result<()> {
    let key = input.parse::<K>()?;
    let duplicate = seen.contains(&name);
    seen.push(name);
    if duplicate {
        let message = format!("{ATTR}: duplicate key `{name}`; give each key once");
        errors.push(syn::Error::new_spanned(&key, message));
    }
    if input.parse::<Option<Token![=]>>().ok().flatten().is_none() {
        let tokens = skip_arg(input);
        let message = format!("{ATTR}: `{name}` needs a value, like `{name} = {}`", example(name));
        errors.push(syn::Error::new_spanned(quote!(#key #tokens), message));
        return Ok(());
    }
    let tokens = skip_arg(input);
    match convert(&tokens) {
        Ok(value) if !duplicate => *slot = Some(Arg { key, tokens, value }),
        Ok(_) => {}
        Err(err) => errors.push(err),
    }
    Ok(())
}

/// Parses `upcast = [path, ...]` into `slot`, as [`parse_arg`] does a literal.
fn parse_upcast(
    input: ParseStream,
    slot: &mut Option<Arg<kw::upcast, Vec<Path>>>,
    Progress { seen, errors }: &mut Progress,
) -> syn::Result<()> {
    let key = input.parse::<kw::upcast>()?;
    let duplicate = seen.contains(&"upcast");
    seen.push("upcast");
    if duplicate {
        errors.push(syn::Error::new_spanned(key, format!("{ATTR}: duplicate key `upcast`; give each key once")));
    }
    let has_value = input.parse::<Option<Token![=]>>().ok().flatten().is_some();
    let tokens = skip_arg(input);
    let value = if has_value { upcast_list(&tokens) } else { Err(expected_list(quote!(#key #tokens))) };
    match value {
        Ok(value) if !duplicate => *slot = Some(Arg { key, tokens, value }),
        Ok(_) => {}
        Err(err) => errors.push(err),
    }
    Ok(())
}

fn expected_list(tokens: TokenStream) -> syn::Error {
    let message = format!(
        "{ATTR}: `upcast` takes a list of functions, one per version before the handler's, like `upcast = [v1_to_v2, v2_to_v3]`"
    );
    syn::Error::new_spanned(tokens, message)
}

/// `[path, ...]`, not empty.
fn upcast_list(tokens: &TokenStream) -> syn::Result<Vec<Path>> {
    let parser = |input: ParseStream| {
        let content;
        syn::bracketed!(content in input);
        content.parse_terminated(Path::parse_mod_style, Token![,])
    };
    let paths = syn::parse::Parser::parse2(parser, tokens.clone()).map_err(|_| expected_list(tokens.clone()))?;
    if paths.is_empty() {
        let message =
            format!("{ATTR}: `upcast` names no function; name one per version before the handler's, or remove it");
        return Err(syn::Error::new_spanned(tokens, message));
    }
    Ok(paths.into_iter().collect())
}

/// Consumes the tokens up to the next top-level comma, or to the end.
fn skip_arg(input: ParseStream) -> TokenStream {
    let mut tokens = TokenStream::new();
    while !input.is_empty() && !input.peek(Token![,]) {
        // A token tree always parses while the input is not empty.
        if let Ok(tt) = input.parse::<TokenTree>() {
            tokens.extend([tt]);
        }
    }
    tokens
}

fn unknown_key(tokens: &TokenStream) -> syn::Error {
    if let Some(TokenTree::Ident(ident)) = tokens.clone().into_iter().next() {
        let message = format!("{ATTR}: unknown key `{ident}`; valid keys: {}", keys());
        syn::Error::new_spanned(ident, message)
    } else {
        let message = format!("{ATTR}: expected `key = value`; valid keys: {}", keys());
        syn::Error::new_spanned(tokens, message)
    }
}

/// An example value for each key, for messages that suggest the fix.
fn example(name: &str) -> &'static str {
    if let Some(room) = ROOMS.iter().find(|room| room.key() == name) {
        return room.example();
    }
    match name {
        "event_type" => "\"payment\"",
        "max_retries" => "240",
        "version" => "2",
        "backoff" => "\"exp\"",
        "base" => "\"1s\"",
        "max" => "\"1h\"",
        "jitter" => "0.15",
        "max_age" => "\"7d\"",
        "timeout" => "\"30s\"",
        "breaker" => "\"50% of 20 in 1m\"",
        "encrypt" => "true",
        "clear" => "[\"/id\", \"/currency\"]",
        "subject" => "\"/customer_id\"",
        _ => "\"::dlq_core\"",
    }
}

pub(crate) fn expected_literal(name: &str, tokens: &dyn ToTokens) -> syn::Error {
    let what = match name {
        "max_retries" | "version" => "an integer literal",
        "jitter" => "a float literal",
        "encrypt" => "`true` or `false`",
        "clear" => "an array of JSON pointers",
        _ => ROOMS.iter().find(|room| room.key() == name).map_or("a string literal", |room| room.takes()),
    };
    let message = format!("{ATTR}: `{name}` takes {what}, like `{name} = {}`", example(name));
    syn::Error::new_spanned(tokens, message)
}

fn string(name: &str, lit: &Lit) -> syn::Result<LitStr> {
    match lit {
        Lit::Str(s) if s.suffix().is_empty() => Ok(s.clone()),
        _ => Err(expected_literal(name, lit)),
    }
}

fn event_type(name: &str, lit: &Lit) -> syn::Result<LitStr> {
    let lit = string(name, lit)?;
    let value = lit.value();
    if value.is_empty() {
        let message =
            format!("{ATTR}: `event_type` must not be empty; name the events, like `event_type = \"payment\"`");
        return Err(syn::Error::new_spanned(&lit, message));
    }
    if value.trim() != value {
        let message = format!("{ATTR}: `event_type` must not start or end with whitespace");
        return Err(syn::Error::new_spanned(&lit, message));
    }
    Ok(lit)
}

fn max_retries(name: &str, lit: &Lit) -> syn::Result<u32> {
    let Lit::Int(int) = lit else {
        return Err(expected_literal(name, lit));
    };
    match int.suffix() {
        "" | "u32" => {}
        _ => {
            let message = format!("{ATTR}: `max_retries` is a `u32`; remove the `{}` suffix", int.suffix());
            return Err(syn::Error::new_spanned(int, message));
        }
    }
    int.base10_parse::<u32>().map_err(|_| {
        let message = format!("{ATTR}: `max_retries` must be a whole number from 0 to {}", u32::MAX);
        syn::Error::new_spanned(int, message)
    })
}

fn version(name: &str, lit: &Lit) -> syn::Result<u32> {
    let Lit::Int(int) = lit else {
        return Err(expected_literal(name, lit));
    };
    if !matches!(int.suffix(), "" | "u32") {
        let message = format!("{ATTR}: `version` is a `u32`; remove the `{}` suffix", int.suffix());
        return Err(syn::Error::new_spanned(int, message));
    }
    match int.base10_parse::<u32>() {
        Ok(0) => {
            let message = format!(
                "{ATTR}: `version` starts at 1, the first version of an event type's contract; write `version = 1` or leave it out"
            );
            Err(syn::Error::new_spanned(int, message))
        }
        Ok(n) => Ok(n),
        Err(_) => {
            let message = format!("{ATTR}: `version` must be a whole number from 1 to {}", u32::MAX);
            Err(syn::Error::new_spanned(int, message))
        }
    }
}

fn backoff(name: &str, lit: &Lit) -> syn::Result<BackoffKind> {
    let lit = string(name, lit)?;
    BackoffKind::from_name(&lit.value()).ok_or_else(|| {
        let message = format!("{ATTR}: unknown backoff {:?}; valid backoffs: {}", lit.value(), BackoffKind::CHOICES);
        syn::Error::new_spanned(&lit, message)
    })
}

fn duration_value(name: &str, lit: &Lit) -> syn::Result<Millis> {
    let lit = string(name, lit)?;
    match duration::parse(&lit.value()) {
        Ok(0) => {
            let message = match name {
                "base" => format!("{ATTR}: `base` must be longer than zero; for no wait use `backoff = \"none\"`"),
                _ => format!("{ATTR}: `{name}` must be longer than zero"),
            };
            Err(syn::Error::new_spanned(&lit, message))
        }
        Ok(millis) => Ok(millis),
        Err(why) => {
            let message = format!(
                "{ATTR}: invalid duration {:?} for `{name}`: {why}; write numbers with units such as ms, s, m, h or d, like \"250ms\", \"30s\", \"1h 30m\" or \"7d\"",
                lit.value()
            );
            Err(syn::Error::new_spanned(&lit, message))
        }
    }
}

fn breaker(name: &str, lit: &Lit) -> syn::Result<LitStr> {
    let lit = string(name, lit)?;
    let zero_window = match dlq_breaker_rule::parse(&lit.value()) {
        Ok(rule) if rule.window.is_some_and(|w| w.is_zero()) => true,
        Ok(_) => return Ok(lit),
        Err(_) => false,
    };
    let why = if zero_window { "its window must be longer than zero" } else { "it does not parse" };
    let message = format!(
        "{ATTR}: invalid `breaker` rule {:?}: {why}; write \"{}\" (a percent from 1 to 100, a number of calls, a duration such as \"30s\" or \"1m\"), like `breaker = {:?}`",
        lit.value(),
        dlq_breaker_rule::FORM,
        dlq_breaker_rule::EXAMPLE,
    );
    Err(syn::Error::new_spanned(&lit, message))
}

/// A JSON pointer (RFC 6901) to one field of the payload: it starts with `/`, and a `~` is
/// followed by `0` (a `~` in the name) or `1` (a `/` in the name).
fn subject(name: &str, lit: &Lit) -> syn::Result<LitStr> {
    let lit = string(name, lit)?;
    let value = lit.value();
    let why = if !value.starts_with('/') {
        "it must start with `/` and name a field of the payload"
    } else if bad_escape(&value) {
        "a `~` must be followed by `0` (for `~`) or `1` (for `/`)"
    } else {
        return Ok(lit);
    };
    let message = format!(
        "{ATTR}: invalid `subject` {value:?}: {why}; write a JSON pointer (RFC 6901) to the field holding whose data the event is, like `subject = \"/customer_id\"` or `subject = \"/card/holder_id\"`"
    );
    Err(syn::Error::new_spanned(&lit, message))
}

fn jitter(name: &str, lit: &Lit) -> syn::Result<f64> {
    let value = match lit {
        Lit::Float(float) if matches!(float.suffix(), "" | "f64") => float.base10_parse::<f64>()?,
        _ => return Err(expected_literal(name, lit)),
    };
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        let message = format!("{ATTR}: `jitter` must be from 0.0 to 1.0 (0.15 spreads delays by ±15 %)");
        Err(syn::Error::new_spanned(lit, message))
    }
}

fn boolean(name: &str, lit: &Lit) -> syn::Result<LitBool> {
    match lit {
        Lit::Bool(b) => Ok(b.clone()),
        _ => Err(expected_literal(name, lit)),
    }
}

/// `["/id", "/currency"]` (`clear`, `redact`): JSON pointers to fields (never `""`, the whole
/// payload), each `~` escaping `~0` or `~1` (RFC 6901).
pub(crate) fn pointers(name: &str, tokens: &TokenStream) -> syn::Result<Vec<LitStr>> {
    let array = syn::parse2::<syn::ExprArray>(tokens.clone()).map_err(|_| expected_literal(name, tokens))?;
    let like = if name == "clear" { "\"/id\"" } else { "\"/card/number\"" };
    let mut pointers = Vec::new();
    let mut errors = Errors::default();
    for elem in &array.elems {
        match elem {
            syn::Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => {
                let value = s.value();
                let why = if !value.starts_with('/') {
                    Some(format!("start it with `/`, like {like}"))
                } else if bad_escape(&value) {
                    Some("a `~` must be followed by `0` (for `~`) or `1` (for `/`)".to_owned())
                } else {
                    None
                };
                match why {
                    None => pointers.push(s.clone()),
                    Some(why) => {
                        let message =
                            format!("{ATTR}: `{name}` entry {value:?} is not a JSON pointer to a field: {why}");
                        errors.push(syn::Error::new_spanned(s, message));
                    }
                }
            }
            other => errors.push(expected_literal(name, other)),
        }
    }
    errors.finish()?;
    Ok(pointers)
}

/// Whether a `~` of `pointer` is not `~0` or `~1` (RFC 6901).
fn bad_escape(pointer: &str) -> bool {
    pointer.split('~').skip(1).any(|rest| !rest.starts_with(['0', '1']))
}

fn crate_path(name: &str, lit: &Lit) -> syn::Result<Path> {
    let lit = string(name, lit)?;
    lit.parse::<Path>().map_err(|_| {
        let message = format!("{ATTR}: `crate` must be a path, like `crate = \"::dlq_core\"`");
        syn::Error::new_spanned(&lit, message)
    })
}

impl RawArgs {
    /// Applies the rules between keys and returns the checked arguments.
    ///
    /// # Errors
    /// Every error found, in parsing and here, combined.
    pub(crate) fn build(mut self) -> syn::Result<Args> {
        self.check_backoff();
        self.check_chain();
        if let (Some(base), Some(max)) = (&self.base, &self.max)
            && max.value < base.value
        {
            let message = format!(
                "{ATTR}: `max` ({}) is shorter than `base` ({}); the longest delay cannot be shorter than the first",
                duration::display(max.value),
                duration::display(base.value)
            );
            self.progress.errors.push(syn::Error::new_spanned(&max.tokens, message));
        }
        if let Some(clear) = &self.clear
            && !self.encrypt.as_ref().is_some_and(|e| e.value.value)
        {
            let message =
                format!("{ATTR}: `clear` has no effect without `encrypt = true`; add `encrypt = true` or remove it");
            self.progress.errors.push(syn::Error::new_spanned(clear.key, message));
        }
        if self.event_type.is_none() && !self.progress.seen.contains(&"event_type") {
            self.progress.errors.push(missing_event_type());
        }
        self.progress.errors.finish()?;
        // Reported above: missing, or present with an invalid value.
        let Some(event_type) = self.event_type else {
            return Err(missing_event_type());
        };
        let krate = self.krate.map_or_else(|| quote!(::dlq_core), |k| k.value.into_token_stream());
        Ok(Args {
            event_type: event_type.value,
            version: self.version.map_or(1, |a| a.value),
            upcast: self.upcast.map(|a| a.value).unwrap_or_default(),
            max_retries: self.max_retries.map(|a| a.value),
            backoff: self.backoff.map(|a| a.value),
            base: self.base.map(|a| a.value),
            max: self.max.map(|a| a.value),
            jitter: self.jitter.map(|a| a.value),
            max_age: self.max_age.map(|a| a.value),
            timeout: self.timeout.map(|a| a.value),
            breaker: self.breaker.map(|a| a.value),
            encrypt: self.encrypt.is_some_and(|a| a.value.value),
            clear: self.clear.map(|a| a.value).unwrap_or_default(),
            subject: self.subject.map(|a| a.value),
            rooms: self.rooms.into_iter().map(|(room, arg)| (room, arg.value)).collect(),
            krate,
        })
    }

    /// `upcast` names one function per version before `version`.
    fn check_chain(&mut self) {
        let version = self.version.as_ref().map_or(1, |v| v.value);
        let needs = version - 1;
        let steps = || {
            let steps: Vec<String> = (1..version).take(3).map(|v| format!("{v} to {}", v + 1)).collect();
            let more = if needs > 3 { ", …" } else { "" };
            format!("{}{more}", steps.join(", "))
        };
        let message = match (&self.upcast, &self.version) {
            (None, Some(v)) if needs > 0 && !self.progress.seen.contains(&"upcast") => (
                v.tokens.clone(),
                format!(
                    "{ATTR}: `version = {version}` needs `upcast = [...]` naming {needs} upcaster{}, one per version before it ({}), so that rows parked by earlier versions can be decoded; for a version whose payloads decode as they are, name `dlq_core::handlers::unchanged`",
                    plural(needs as usize),
                    steps()
                ),
            ),
            (Some(chain), _) if needs == 0 => (
                chain.key.to_token_stream(),
                format!(
                    "{ATTR}: `upcast` needs `version` above 1: add `version = {}` for a chain of {} upcaster{}",
                    chain.value.len() + 1,
                    chain.value.len(),
                    plural(chain.value.len())
                ),
            ),
            (Some(chain), _) if chain.value.len() != needs as usize => {
                let has = chain.value.len();
                let why = if has < needs as usize {
                    format!("a link is missing: give one upcaster per step ({})", steps())
                } else {
                    format!(
                        "remove {} or raise `version`",
                        if has - needs as usize == 1 { "one" } else { "the extra ones" }
                    )
                };
                (
                    chain.tokens.clone(),
                    format!(
                        "{ATTR}: `upcast` names {has} upcaster{}, but `version = {version}` needs {needs}; {why}",
                        plural(has)
                    ),
                )
            }
            _ => return,
        };
        self.progress.errors.push(syn::Error::new_spanned(message.0, message.1));
    }

    /// `base`, `max` and `jitter` must mean something for the chosen backoff.
    fn check_backoff(&mut self) {
        let Some(backoff) = &self.backoff else { return };
        let unused = |key: &dyn ToTokens, name: &str, kind: &str, why: &str| {
            let message = format!("{ATTR}: `{name}` has no effect with `backoff = \"{kind}\"`{why}; remove it");
            syn::Error::new_spanned(key, message)
        };
        match backoff.value {
            BackoffKind::None => {
                let why = ", which retries at once";
                if let Some(base) = &self.base {
                    self.progress.errors.push(unused(&base.key, "base", "none", why));
                }
                if let Some(max) = &self.max {
                    self.progress.errors.push(unused(&max.key, "max", "none", why));
                }
                if let Some(jitter) = &self.jitter {
                    self.progress.errors.push(unused(&jitter.key, "jitter", "none", why));
                }
            }
            BackoffKind::Fixed => {
                if let Some(max) = &self.max {
                    let why = ", which waits `base` every time";
                    self.progress.errors.push(unused(&max.key, "max", "fixed", why));
                }
            }
            BackoffKind::Exponential | BackoffKind::Linear => {}
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn missing_event_type() -> syn::Error {
    let message = format!(
        "{ATTR}: missing `event_type`; add `event_type = \"...\"`, the name this handler's events are stored and dispatched under"
    );
    syn::Error::new(Span::call_site(), message)
}

/// Parses the attribute's arguments.
///
/// # Errors
/// Every error in them, combined.
pub(crate) fn parse(args: TokenStream) -> syn::Result<Args> {
    syn::parse2::<RawArgs>(args)?.build()
}

/// The messages of every error in `args` (none when they parse), for tests.
#[cfg(test)]
pub(crate) fn parse_messages(args: TokenStream) -> Vec<String> {
    match parse(args) {
        Ok(_) => Vec::new(),
        Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(tokens: TokenStream) -> Args {
        match parse(tokens) {
            Ok(args) => args,
            Err(err) => panic!("{err}"),
        }
    }

    fn messages(tokens: TokenStream) -> Vec<String> {
        parse_messages(tokens)
    }

    #[test]
    fn parses_every_key() {
        let args = parse_ok(quote! {
            event_type = "payment", max_retries = 240, backoff = "linear", base = "250ms",
            max = "5m", jitter = 0.5, max_age = "7d", timeout = "30s", breaker = "25% of 10 in 30s",
            crate = "::dlq",
        });
        assert_eq!(args.event_type.value(), "payment");
        assert_eq!(args.version, 1, "the default");
        assert_eq!(args.max_retries, Some(240));
        assert_eq!(args.backoff, Some(BackoffKind::Linear));
        assert_eq!((args.base, args.max), (Some(250), Some(300_000)));
        assert_eq!(args.jitter, Some(0.5));
        assert_eq!((args.max_age, args.timeout), (Some(7 * 86_400_000), Some(30_000)));
        assert_eq!(args.breaker.map(|b| b.value()).as_deref(), Some("25% of 10 in 30s"));
        assert_eq!(args.krate.to_string(), ":: dlq");
    }

    #[test]
    fn breaker_rules_are_checked_with_the_runtime_parser() {
        for ok in ["50% of 20 in 1m", "75%", "10% in 10s", "5% of 3"] {
            assert_eq!(messages(quote!(event_type = "x", breaker = #ok)), Vec::<String>::new(), "{ok}");
        }
        let got = messages(quote!(event_type = "x", breaker = "half of twenty"));
        assert_eq!(
            got,
            [
                "`#[dead_letter]`: invalid `breaker` rule \"half of twenty\": it does not parse; write \"<percent>% [of <min-calls>] [in <window>]\" (a percent from 1 to 100, a number of calls, a duration such as \"30s\" or \"1m\"), like `breaker = \"50% of 20 in 1m\"`"
            ]
        );
        for bad in ["0%", "101%", "50% of x", "50% in soon", "50% twice", ""] {
            assert!(messages(quote!(event_type = "x", breaker = #bad))[0].contains("it does not parse"), "{bad}");
        }
        assert!(
            messages(quote!(event_type = "x", breaker = "50% in 0s"))[0].contains("window must be longer than zero")
        );
        assert!(messages(quote!(event_type = "x", breaker = 50))[0].contains("`breaker` takes a string literal"));
    }

    #[test]
    fn the_docs_table_lists_every_key() {
        let docs = include_str!("lib.rs");
        for key in keys().split(", ") {
            assert!(
                docs.contains(&format!("/// | `{key}` | ")),
                "`{key}` is missing from the table of `#[dead_letter]`'s docs"
            );
        }
    }

    #[test]
    fn encrypt_and_clear() {
        let args = parse_ok(quote!(event_type = "x", encrypt = true, clear = ["/id", "/a/b",]));
        assert!(args.encrypt);
        assert_eq!(args.clear.iter().map(LitStr::value).collect::<Vec<_>>(), ["/id", "/a/b"]);
        assert!(!parse_ok(quote!(event_type = "x", encrypt = false)).encrypt);
        let got = messages(quote!(event_type = "x", clear = ["/id"]));
        assert_eq!(
            got,
            ["`#[dead_letter]`: `clear` has no effect without `encrypt = true`; add `encrypt = true` or remove it"]
        );
        let got = messages(quote!(event_type = "x", encrypt = true, clear = ["id", ""]));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].contains("`clear` entry \"id\" is not a JSON pointer"), "{got:?}");
        assert!(messages(quote!(event_type = "x", encrypt = "yes"))[0].contains("`encrypt` takes `true` or `false`"));
        assert!(
            messages(quote!(event_type = "x", encrypt = true, clear = "/id"))[0]
                .contains("takes an array of JSON pointers")
        );
    }

    #[test]
    fn subject_is_a_json_pointer() {
        for ok in ["/customer_id", "/card/holder", "/a~1b", "/m~0n", "/items/0/id"] {
            assert_eq!(
                parse_ok(quote!(event_type = "x", subject = #ok)).subject.map(|s| s.value()).as_deref(),
                Some(ok)
            );
        }
        for (bad, why) in [
            ("customer_id", "must start with `/`"),
            ("", "must start with `/`"),
            ("/a~2b", "followed by `0`"),
            ("/a~", "followed by `0`"),
        ] {
            let got = messages(quote!(event_type = "x", subject = #bad));
            assert!(got[0].contains(why), "{bad}: {got:?}");
        }
        assert!(messages(quote!(event_type = "x", subject = 42))[0].contains("`subject` takes a string literal"));
    }

    #[test]
    fn reports_all_errors_together() {
        let got = messages(quote!(retries = 3, max_retries = -1, max_retries = 2, backoff = "expo"));
        assert_eq!(got.len(), 5, "{got:#?}");
        assert!(got[0].contains("unknown key `retries`; valid keys: event_type, version, upcast, max_retries"));
        assert!(got[1].contains("from 0 to 4294967295"));
        assert!(got[2].contains("duplicate key `max_retries`"));
        assert!(got[3].contains("unknown backoff \"expo\"; valid backoffs: \"exp\", \"fixed\""));
        assert!(got[4].contains("missing `event_type`"));
    }

    #[test]
    fn upcast_names_one_function_per_earlier_version() {
        let args = parse_ok(quote!(event_type = "x", version = 3, upcast = [v1_to_v2, crate::v2::to_v3,]));
        let names: Vec<_> = args.upcast.iter().map(|p| p.to_token_stream().to_string()).collect();
        assert_eq!(names, ["v1_to_v2", "crate :: v2 :: to_v3"]);
        assert!(parse_ok(quote!(event_type = "x")).upcast.is_empty());
        let got = messages(quote!(event_type = "x", version = 3, upcast = [v1_to_v2]));
        assert_eq!(
            got,
            [
                "`#[dead_letter]`: `upcast` names 1 upcaster, but `version = 3` needs 2; a link is missing: give one upcaster per step (1 to 2, 2 to 3)"
            ]
        );
        let got = messages(quote!(event_type = "x", version = 2, upcast = [a, b, c]));
        assert!(got[0].ends_with("needs 1; remove the extra ones or raise `version`"), "{got:?}");
        let got = messages(quote!(event_type = "x", version = 5));
        assert!(got[0].contains("`version = 5` needs `upcast = [...]` naming 4 upcasters, one per version before it (1 to 2, 2 to 3, 3 to 4, …)"), "{got:?}");
        let got = messages(quote!(event_type = "x", upcast = [a]));
        assert!(got[0].contains("`upcast` needs `version` above 1: add `version = 2`"), "{got:?}");
        for bad in [quote!(upcast = a), quote!(upcast = "a"), quote!(upcast = [1]), quote!(upcast)] {
            let got = messages(quote!(event_type = "x", version = 2, #bad));
            assert!(got[0].contains("`upcast` takes a list of functions"), "{bad}: {got:?}");
        }
        assert!(messages(quote!(event_type = "x", version = 2, upcast = []))[0].contains("names no function"));
        let got = messages(quote!(event_type = "x", version = 2, upcast = [a], upcast = [a]));
        assert!(got[0].contains("duplicate key `upcast`"), "{got:?}");
    }

    #[test]
    fn cross_key_rules() {
        let got = messages(quote!(event_type = "x", backoff = "none", base = "1s"));
        assert_eq!(
            got,
            ["`#[dead_letter]`: `base` has no effect with `backoff = \"none\"`, which retries at once; remove it"]
        );
        let got = messages(quote!(event_type = "x", base = "1m", max = "1s"));
        assert!(got[0].contains("`max` (1s) is shorter than `base` (1m)"), "{got:?}");
        let got = messages(quote!(event_type = "x", backoff = "fixed", max = "1s"));
        assert!(got[0].contains("`max` has no effect with `backoff = \"fixed\"`"), "{got:?}");
    }

    #[test]
    fn rejects_bad_literals() {
        assert!(messages(quote!(event_type = payment))[0].contains("`event_type` takes a string literal"));
        assert!(messages(quote!(event_type = ""))[0].contains("must not be empty"));
        assert!(messages(quote!(event_type = " x"))[0].contains("whitespace"));
        assert!(messages(quote!(event_type = "x", max_retries = 5_000_000_000))[0].contains("from 0 to"));
        assert!(messages(quote!(event_type = "x", max_retries = 3u8))[0].contains("remove the `u8` suffix"));
        assert_eq!(parse_ok(quote!(event_type = "x", version = 2, upcast = [crate::v1_to_v2])).version, 2);
        assert!(messages(quote!(event_type = "x", version = 0))[0].contains("`version` starts at 1"));
        assert!(messages(quote!(event_type = "x", version = "2"))[0].contains("`version` takes an integer literal"));
        assert!(messages(quote!(event_type = "x", version = 1.5))[0].contains("`version` takes an integer literal"));
        assert!(messages(quote!(event_type = "x", version = 2u8))[0].contains("remove the `u8` suffix"));
        assert!(messages(quote!(event_type = "x", version = -1))[0].contains("from 1 to 4294967295"));
        assert!(messages(quote!(event_type = "x", jitter = 1.5))[0].contains("from 0.0 to 1.0"));
        assert!(messages(quote!(event_type = "x", jitter = 1))[0].contains("takes a float literal"));
        assert!(messages(quote!(event_type = "x", timeout = "0s"))[0].contains("longer than zero"));
        assert!(messages(quote!(event_type = "x", base = "5 minutos"))[0].contains("invalid duration"));
        assert!(messages(quote!(event_type = "x", crate = "a b"))[0].contains("must be a path"));
        assert!(messages(quote!(event_type))[0].contains("`event_type` needs a value"));
        assert!(messages(quote!(event_type = "x", 42))[0].contains("expected `key = value`"));
    }
}
