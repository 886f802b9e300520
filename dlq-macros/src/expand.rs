//! Generating the code of `#[dead_letter]`: the live wrapper under the handler's own name, and
//! beside it a same-named type that holds the body, the dispatch entry point and the
//! registration.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote};
use syn::spanned::Spanned;
use syn::{Attribute, Ident, ItemFn, PatType, Type};

use crate::attr::{self, Args, BackoffKind};
use crate::errors::Errors;
use crate::handler::Handler;
use crate::upcast;

/// Expands `#[dead_letter(args)] item`.
///
/// On any error the item is emitted unchanged beside the errors, so that the rest of the crate
/// still type-checks and IDEs keep working.
pub(crate) fn dead_letter(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = attr::parse(args);
    let handler = Handler::parse(&item);
    match (args, handler) {
        (Ok(args), Ok(handler)) => expand(&args, &handler),
        (args, handler) => {
            let mut errors = Errors::default();
            for err in [args.err(), handler.err()].into_iter().flatten() {
                errors.push(err);
            }
            let mut out = item;
            out.extend(errors.finish().err().map(syn::Error::into_compile_error));
            out
        }
    }
}

/// The paths generated code names: `::dlq_core::__private` (or the `crate = "..."` override).
pub(crate) struct Paths {
    pub(crate) private: TokenStream,
}

impl Paths {
    /// `__private::name` with every token on `span`, so errors about it land there.
    fn at(&self, span: Span, name: &str) -> TokenStream {
        let (private, name) = (&self.private, Ident::new(name, span));
        respan(quote!(#private::#name), span)
    }
}

fn expand(args: &Args, handler: &Handler) -> TokenStream {
    let krate = &args.krate;
    let paths = Paths { private: quote!(#krate::__private) };
    let wrapper = wrapper(&paths, handler);
    let glue = glue(&paths, args, handler);
    let assertions = assertions(&paths, args, handler);
    quote! {
        #wrapper
        #glue
        #assertions
    }
}

/// The function the application calls: the user's name, attributes and visibility; runs the
/// body and parks a failure before returning it.
fn wrapper(paths: &Paths, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let ItemFn { attrs, vis, sig, .. } = &handler.func;
    let (asyncness, fn_token, ident) = (&sig.asyncness, &sig.fn_token, &sig.ident);
    let output = &handler.output;
    let names = handler.arg_names();
    let params = names.iter().zip(handler.arg_types()).map(|(name, ty)| quote!(#name: #ty));
    let attrs = attrs.iter().map(lint_expect_as_allow);
    let classify = classify(paths, handler.error_span());
    let event = &names[0];
    let span = output.span();
    // Everything that needs `HandlerResult` is on the return type, so that a return type that
    // is not a `Result` is reported there.
    let returns = match handler.result_parts() {
        Some((ok, err)) => {
            let (result, handler_error) = (paths.at(span, "Result"), paths.at(span, "HandlerError"));
            quote!(#result<#ok, #handler_error<#err>>)
        }
        None => respan(quote!(#p::Result<#p::OkOf<#output>, #p::HandlerError<#p::ErrOf<#output>>>), span),
    };
    let run = respan(quote!(#p::HandlerResult::into_result(#ident::__dlq_inner(#(#names),*).await)), span);
    quote! {
        #(#attrs)*
        #vis #asyncness #fn_token #ident(#(#params),*)
            -> #returns
        {
            let __dlq_retained = {
                use #p::{ViaClone as _, ViaNotAnEvent as _, ViaSerialize as _};
                (&&&#p::Retainer(&#event)).__dlq_retain()
            };
            match #run {
                #p::Result::Ok(__dlq_ok) => #p::Result::Ok(__dlq_ok),
                #p::Result::Err(__dlq_err) => {
                    let __dlq_failure = #classify;
                    let __dlq_registration = <#ident as #p::Handler>::registration();
                    #p::Result::Err(
                        #p::park_live(__dlq_registration, __dlq_retained.into_payload(), __dlq_failure, __dlq_err)
                            .await,
                    )
                }
            }
        }
    }
}

/// Classifies `__dlq_err` by the most specific tier its type supports (see
/// `dlq_core::__private::Classifier`); a type that supports none fails on
/// `ClassifiableError`, on `span`.
fn classify(paths: &Paths, span: Span) -> TokenStream {
    let p = &paths.private;
    let finish = respan(
        quote!(#p::ClassifiableError::__dlq_finish((&&&&#p::Classifier(&__dlq_err)).__dlq_failure(), &__dlq_err)),
        span,
    );
    quote! {{
        use #p::{ViaClassify as _, ViaDynError as _, ViaError as _, ViaFallback as _};
        #finish
    }}
}

/// The same-named type, its inherent impl (body, dispatch, registration), its `Handler` impl
/// and its submission to `inventory`.
fn glue(paths: &Paths, args: &Args, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let ident = &handler.func.sig.ident;
    let vis = respan(handler.func.vis.to_token_stream(), Span::call_site());
    let cfgs: Vec<_> = handler.cfg_attrs().collect();
    let inner = inner(handler);
    let dispatch = dispatch(paths, handler);
    let missing_state = missing_state(paths, handler);
    let registration = registration(paths, args, handler);
    let links = upcast::links(paths, args);
    let schemas = upcast::schemas(paths, args, handler);
    let event_type = &args.event_type;
    quote! {
        #(#cfgs)*
        #[allow(non_camel_case_types, dead_code, reason = "named after its handler, so `handlers![...]` can name it")]
        #[doc(hidden)]
        #vis struct #ident {}

        #(#cfgs)*
        impl #ident {
            #inner
            #dispatch
            #missing_state
            #links
            #schemas
            #registration
        }

        #(#cfgs)*
        #[diagnostic::do_not_recommend]
        impl #p::Handler for #ident {
            const EVENT_TYPE: &'static str = #event_type;
            fn registration() -> &'static #p::Registration {
                &Self::__DLQ_REGISTRATION
            }
        }

        #(#cfgs)*
        #p::inventory::submit! {
            #ident::__DLQ_REGISTRATION
        }
    }
}

/// The user's function, renamed, holding the body with its argument patterns.
fn inner(handler: &Handler) -> TokenStream {
    let mut sig = handler.func.sig.clone();
    sig.ident = Ident::new("__dlq_inner", sig.ident.span());
    let lints = handler.func.attrs.iter().filter(|a| is_lint(a)).map(lint_expect_as_allow);
    let block = &handler.func.block;
    quote! {
        #(#lints)*
        #[allow(clippy::unused_async, reason = "`#[dead_letter]` requires `async fn`, await or not")]
        #sig #block
    }
}

/// The type-erased entry point of the registry: decodes the event, extracts the other
/// arguments, runs the body and reports the outcome; and beside it the decode alone, for
/// `Registration::check_payload`.
fn dispatch(paths: &Paths, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let names = handler.arg_names();
    let event_ty = &handler.event.ty;
    let extract = handler.extras.iter().zip(&names[1..]).map(|(arg, name)| {
        let ty = &arg.ty;
        quote! {
            let #name = match {
                use #p::{ViaFromInvocation as _, ViaUnsupported as _};
                (&&#p::Extractor::<#ty>::new()).__dlq_extract(&__dlq_invocation)
            } {
                #p::Result::Ok(__dlq_value) => __dlq_value,
                #p::Result::Err(__dlq_failure) => return #p::HandlerOutcome::Failed(__dlq_failure),
            };
        }
    });
    let event = &names[0];
    let classify = classify(paths, handler.error_span());
    let run =
        respan(quote!(#p::HandlerResult::into_result(Self::__dlq_inner(#(#names),*).await)), handler.output.span());
    quote! {
        fn __dlq_dispatch(
            __dlq_invocation: #p::Invocation,
        ) -> #p::BoxFuture<'static, #p::HandlerOutcome> {
            #p::Box::pin(async move {
                let #event = match {
                    use #p::{ViaDeserialize as _, ViaNotDeserializable as _};
                    (&&#p::Decoder::<#event_ty>::new()).__dlq_decode(&__dlq_invocation.payload)
                } {
                    #p::Result::Ok(__dlq_event) => __dlq_event,
                    #p::Result::Err(__dlq_outcome) => return __dlq_outcome,
                };
                #(#extract)*
                match #run {
                    #p::Result::Ok(_) => #p::HandlerOutcome::Succeeded,
                    #p::Result::Err(__dlq_err) => #p::HandlerOutcome::Failed(#classify),
                }
            })
        }

        fn __dlq_check(__dlq_payload: &#p::Payload) -> #p::Result<(), #p::String> {
            #p::checked({
                use #p::{ViaDeserialize as _, ViaNotDeserializable as _};
                (&&#p::Decoder::<#event_ty>::new()).__dlq_decode(__dlq_payload)
            })
        }
    }
}

/// The check a retrier runs once at start-up: the first `State<T>` argument whose `T` its
/// context lacks.
fn missing_state(paths: &Paths, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    if handler.extras.is_empty() {
        return TokenStream::new();
    }
    let checks = handler.extras.iter().map(|arg| {
        let ty = &arg.ty;
        quote! {{
            use #p::{ViaFromInvocation as _, ViaUnsupported as _};
            if let #p::Option::Some(__dlq_missing) =
                (&&#p::Extractor::<#ty>::new()).__dlq_missing(__dlq_context)
            {
                return #p::Option::Some(__dlq_missing);
            }
        }}
    });
    quote! {
        fn __dlq_missing_state(__dlq_context: &#p::Context) -> #p::Option<&'static str> {
            #(#checks)*
            #p::Option::None
        }
    }
}

/// The handler's registration, a constant.
fn registration(paths: &Paths, args: &Args, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let ident = &handler.func.sig.ident;
    let path = format!("::{}", ident_name(ident));
    // `file!()`/`line!()` on the name's span give the handler's own line, not the attribute's.
    let span = ident.span();
    let file = respan(quote!(#p::file!()), span);
    let line = respan(quote!(#p::line!()), span);
    let event_type = &args.event_type;
    let version = proc_macro2::Literal::u32_unsuffixed(args.version);
    let upcast = upcast::chain(args);
    let policy = policy(paths, args);
    let breaker = match &args.breaker {
        Some(rule) => quote!(#p::Option::Some(#rule)),
        None => quote!(#p::Option::None),
    };
    let missing = if handler.extras.is_empty() {
        quote!(#p::Option::None)
    } else {
        quote!(#p::Option::Some(Self::__dlq_missing_state))
    };
    let registration = quote! {
        #p::registration(
            (#event_type, #version, #upcast),
            #p::concat!(#p::module_path!(), #path),
            (#file, #line),
            (#policy, #breaker),
            (Self::__dlq_dispatch, Self::__dlq_check),
            #missing,
        )
    };
    let registration = if args.encrypt {
        let clear = &args.clear;
        quote!(#p::sealed(#registration, &[#(#clear),*]))
    } else {
        registration
    };
    let registration = match &args.subject {
        Some(pointer) => quote!(#p::with_subject(#registration, #pointer)),
        None => registration,
    };
    let registration = quote!(#p::with_schemas(#registration, Self::__dlq_schemas));
    let registration = args
        .rooms
        .iter()
        .fold(registration, |registration, (room, value)| room.apply(&args.krate, value, registration));
    quote! {
        const __DLQ_REGISTRATION: #p::Registration = #registration;
    }
}

/// The retry policy as a constant expression: `RetryPolicy::DEFAULT` with the fields the
/// attribute sets.
fn policy(paths: &Paths, args: &Args) -> TokenStream {
    let p = &paths.private;
    let duration = |millis: u64| {
        let millis = grouped(millis);
        quote!(#p::Duration::from_millis(#millis))
    };
    let mut sets = Vec::new();
    if let Some(n) = args.max_retries {
        let n = grouped(n.into());
        sets.push(quote!(__dlq_policy.max_retries = #n;));
    }
    if let Some(kind) = args.backoff {
        sets.push(match kind {
            BackoffKind::None => quote!(__dlq_policy.backoff = #p::Backoff::NONE;),
            BackoffKind::Exponential => quote!(__dlq_policy.backoff.kind = #p::BackoffKind::Exponential;),
            BackoffKind::Fixed => quote!(__dlq_policy.backoff.kind = #p::BackoffKind::Fixed;),
            BackoffKind::Linear => quote!(__dlq_policy.backoff.kind = #p::BackoffKind::Linear;),
        });
    }
    if let Some(base) = args.base {
        let base = duration(base);
        sets.push(quote!(__dlq_policy.backoff.base = #base;));
    }
    if let Some(max) = args.max {
        let max = duration(max);
        sets.push(quote!(__dlq_policy.backoff.max = #max;));
    }
    if args.backoff == Some(BackoffKind::Fixed) {
        sets.push(quote!(__dlq_policy.backoff.max = __dlq_policy.backoff.base;));
    }
    if let Some(jitter) = args.jitter {
        let jitter = proc_macro2::Literal::f64_unsuffixed(jitter);
        sets.push(quote!(__dlq_policy.backoff.jitter = #jitter;));
    }
    if let Some(max_age) = args.max_age {
        let max_age = duration(max_age);
        sets.push(quote!(__dlq_policy.max_age = #p::Option::Some(#max_age);));
    }
    if let Some(timeout) = args.timeout {
        let timeout = duration(timeout);
        sets.push(quote!(__dlq_policy.timeout = #p::Option::Some(#timeout);));
    }
    if sets.is_empty() {
        return quote!(#p::RetryPolicy::DEFAULT);
    }
    quote! {{
        let mut __dlq_policy = #p::RetryPolicy::DEFAULT;
        #(#sets)*
        __dlq_policy
    }}
}

/// Checks of the signature's types that the compiler reports on the user's own tokens.
fn assertions(paths: &Paths, args: &Args, handler: &Handler) -> TokenStream {
    let cfgs: Vec<_> = handler.cfg_attrs().collect();
    let check = |ty: &Type, name: &str| {
        let assert = paths.at(ty.span(), name);
        respan(quote!(#assert::<#ty>();), ty.span())
    };
    let event = check(&handler.event.ty, "assert_event");
    let extras = handler.extras.iter().map(|arg: &PatType| check(&arg.ty, "assert_argument"));
    let chain = upcast::check(paths, args, handler);
    quote! {
        #(#cfgs)*
        const _: () = {
            #event
            #(#extras)*
            #chain
        };
    }
}

/// `tokens` with every token, nested ones included, on `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(group) = &tt {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tt = TokenTree::Group(inner);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// A number with `_` every three digits, so long literals stay readable (and lint-clean).
fn grouped(n: u64) -> TokenStream {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out.parse().unwrap_or_else(|_| quote!(#n))
}

fn ident_name(ident: &Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map_or_else(|| name.clone(), str::to_owned)
}

/// Whether `attr` is a lint level (`allow`, `warn`, `deny`, `forbid`, `expect`).
fn is_lint(attr: &Attribute) -> bool {
    ["allow", "warn", "deny", "forbid", "expect"].iter().any(|name| attr.path().is_ident(name))
}

/// `#[expect(..)]` becomes `#[allow(..)]`: the attribute is copied to the wrapper and to the
/// body, and only one of them can fulfil the expectation.
fn lint_expect_as_allow(attr: &Attribute) -> TokenStream {
    if !attr.path().is_ident("expect") {
        return attr.to_token_stream();
    }
    let mut attr = attr.clone();
    if let syn::Meta::List(list) = &mut attr.meta {
        list.path = syn::parse_quote_spanned!(list.path.span()=> allow);
    }
    attr.to_token_stream()
}

/// `__dlq_arg0`, `__dlq_arg1`, ...: the wrapper's and dispatcher's names for the arguments.
pub(crate) fn arg_name(index: usize) -> Ident {
    format_ident!("__dlq_arg{}", index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_digits() {
        assert_eq!(grouped(604_800_000).to_string(), "604_800_000");
        assert_eq!(grouped(240).to_string(), "240");
        assert_eq!(grouped(1000).to_string(), "1_000");
    }

    #[test]
    fn expands_a_handler() {
        let out = dead_letter(
            quote!(event_type = "payment", max_retries = 240),
            quote!(
                pub async fn handle(p: Payment) -> Result<(), E> {
                    Ok(())
                }
            ),
        )
        .to_string();
        assert!(out.contains("pub struct handle { }"), "{out}");
        assert!(out.contains("registration ((\"payment\" , 1 , & [])"), "{out}");
        assert!(out.contains("__dlq_policy . max_retries = 240"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn keeps_the_item_on_error() {
        let out = dead_letter(
            quote!(),
            quote!(
                fn handle(p: Payment) {}
            ),
        )
        .to_string();
        assert!(out.starts_with("fn handle (p : Payment) { }"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 3, "{out}");
    }
}
