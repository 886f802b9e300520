//! Reading the annotated function: what `#[dead_letter]` accepts, with an error on the
//! offending token for everything it does not.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Item, ItemFn, Pat, PatIdent, PatType, PathArguments, ReturnType, Signature,
    Type, TypePath,
};

use crate::errors::Errors;
use crate::expand::arg_name;

const ATTR: &str = "`#[dead_letter]`";

/// An annotated function that can be a handler.
pub(crate) struct Handler {
    /// The function as written.
    pub(crate) func: ItemFn,
    /// The first argument: the event.
    pub(crate) event: PatType,
    /// The arguments after the event, filled from the invocation's context.
    pub(crate) extras: Vec<PatType>,
    /// The return type, which must be a `Result`.
    pub(crate) output: Type,
}

impl Handler {
    /// Reads the annotated item.
    ///
    /// # Errors
    /// Every reason the item cannot be a handler, combined.
    pub(crate) fn parse(item: &TokenStream) -> syn::Result<Self> {
        let func = match syn::parse2::<Item>(item.clone()) {
            Ok(Item::Fn(func)) => func,
            Ok(other) => return Err(not_a_function(&other)),
            Err(err) => return Err(err),
        };
        let mut errors = Errors::default();
        check_signature(&func.sig, &mut errors);
        let mut args = Vec::new();
        for input in &func.sig.inputs {
            match input {
                FnArg::Receiver(receiver) => {
                    let message = format!("{ATTR}: a handler cannot take `self`; make it a free function");
                    errors.push(syn::Error::new_spanned(receiver, message));
                }
                FnArg::Typed(arg) if contains_impl(arg.ty.to_token_stream()) => {
                    let message = format!("{ATTR}: `impl Trait` arguments are not supported; name the type");
                    errors.push(syn::Error::new_spanned(&arg.ty, message));
                }
                FnArg::Typed(arg) => {
                    if args.is_empty() {
                        check_owned_event(&arg.ty, &mut errors);
                    }
                    args.push(arg.clone());
                }
            }
        }
        if func.sig.inputs.is_empty() {
            let message = format!(
                "{ATTR}: a handler takes its event as the first argument, like `async fn handle(event: Payment)`"
            );
            errors.push(syn::Error::new(func.sig.paren_token.span.join(), message));
        }
        let output = output(&func.sig, &mut errors);
        errors.finish()?;
        let mut args = args.into_iter();
        match (args.next(), output) {
            (Some(event), Some(output)) => Ok(Self { event, extras: args.collect(), output, func }),
            _ => Err(syn::Error::new_spanned(&func.sig, format!("{ATTR}: unsupported signature"))),
        }
    }

    /// The wrapper's names for the arguments: the user's name where the pattern is a plain
    /// name (so that docs and IDEs show it), else `__dlq_arg0`, `__dlq_arg1`, ...
    pub(crate) fn arg_names(&self) -> Vec<Ident> {
        let args = std::iter::once(&self.event).chain(&self.extras);
        args.enumerate()
            .map(|(index, arg)| match &*arg.pat {
                Pat::Ident(PatIdent { by_ref: None, subpat: None, ident, .. })
                    if !ident.to_string().starts_with("__dlq") =>
                {
                    ident.clone()
                }
                _ => arg_name(index),
            })
            .collect()
    }

    /// `T` and `E` when the return type is written `Result<T, E>`, so that the wrapper's
    /// signature reads `Result<T, HandlerError<E>>` in docs and IDEs.
    pub(crate) fn result_parts(&self) -> Option<(&Type, &Type)> {
        let Type::Path(TypePath { qself: None, path, .. }) = &self.output else { return None };
        let last = path.segments.last()?;
        let PathArguments::AngleBracketed(generics) = &last.arguments else { return None };
        let mut args = generics.args.iter();
        match (last.ident == "Result", args.next(), args.next(), args.next()) {
            (true, Some(GenericArgument::Type(ok)), Some(GenericArgument::Type(err)), None) => Some((ok, err)),
            _ => None,
        }
    }

    /// Where an error type that cannot be classified is reported: on `E` when the return type
    /// is written `Result<T, E>`, else on the return type.
    pub(crate) fn error_span(&self) -> Span {
        self.result_parts().map_or_else(|| self.output.span(), |(_, err)| err.span())
    }

    /// The event's type, then the further arguments' types.
    pub(crate) fn arg_types(&self) -> impl Iterator<Item = &Type> {
        std::iter::once(&*self.event.ty).chain(self.extras.iter().map(|arg| &*arg.ty))
    }

    /// The function's `#[cfg(..)]` attributes, repeated on every generated item.
    pub(crate) fn cfg_attrs(&self) -> impl Iterator<Item = &Attribute> {
        self.func.attrs.iter().filter(|attr| attr.path().is_ident("cfg"))
    }
}

/// Checks the parts of the signature other than the arguments and the return type.
fn check_signature(sig: &Signature, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        let message = format!("{ATTR}: a handler must be an `async fn`; add `async` before `fn`");
        errors.push(syn::Error::new_spanned(sig.fn_token, message));
    }
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new_spanned(constness, format!("{ATTR}: a handler cannot be a `const fn`")));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(unsafety, format!("{ATTR}: a handler cannot be `unsafe`")));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(abi, format!("{ATTR}: a handler cannot have an `extern` ABI")));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(variadic, format!("{ATTR}: a handler cannot be variadic")));
    }
    let generics = &sig.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        let message = format!(
            "{ATTR}: a handler cannot be generic; the registry needs its event and argument types to be concrete"
        );
        let tokens = (generics.lt_token.is_some()).then(|| generics.to_token_stream());
        let tokens = tokens.unwrap_or_else(|| generics.where_clause.to_token_stream());
        errors.push(syn::Error::new_spanned(tokens, message));
    }
}

/// The return type, which must be written out.
fn output(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    match &sig.output {
        ReturnType::Type(_, ty) if contains_impl(ty.to_token_stream()) => {
            let message = format!("{ATTR}: `impl Trait` is not supported in the return type; name the types");
            errors.push(syn::Error::new_spanned(ty, message));
            None
        }
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => {
            let message = format!(
                "{ATTR}: a handler must return `Result<T, E>`; add a return type, like `-> Result<(), MyError>`"
            );
            errors.push(syn::Error::new_spanned(&sig.ident, message));
            None
        }
    }
}

/// The event is stored and decoded later, when nothing it borrowed from is left: it must be an
/// owned type, without references or lifetimes other than `'static` (`Cow<'static, str>` is
/// fine: it deserializes owned).
fn check_owned_event(ty: &Type, errors: &mut Errors) {
    if !borrows(ty.to_token_stream()) {
        return;
    }
    let instead = match ty {
        Type::Reference(reference) => match &*reference.elem {
            Type::Path(path) if path.path.is_ident("str") => "use `String` instead of `&str`",
            Type::Slice(_) => "use a `Vec` instead of a slice, like `Vec<u8>` instead of `&[u8]`",
            _ => "take it by value, without `&`",
        },
        _ => "use owned types in it, like `String` instead of `&str`",
    };
    let message = format!("{ATTR}: the event must be an owned type, because it is stored and decoded later; {instead}");
    errors.push(syn::Error::new_spanned(ty, message));
}

/// Whether the type holds a reference or a lifetime other than `'static`.
fn borrows(tokens: TokenStream) -> bool {
    let mut tokens = tokens.into_iter().peekable();
    while let Some(tt) = tokens.next() {
        let borrowing = match &tt {
            TokenTree::Punct(punct) if punct.as_char() == '&' => true,
            TokenTree::Punct(punct) if punct.as_char() == '\'' => {
                matches!(tokens.peek(), Some(TokenTree::Ident(name)) if name != "static")
            }
            TokenTree::Group(group) => borrows(group.stream()),
            TokenTree::Punct(_) | TokenTree::Ident(_) | TokenTree::Literal(_) => false,
        };
        if borrowing {
            return true;
        }
    }
    false
}

/// Whether the type mentions `impl Trait` anywhere.
fn contains_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => contains_impl(group.stream()),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

/// The error for an item that is not a function, on its keyword.
fn not_a_function(item: &Item) -> syn::Error {
    let (what, token): (&str, TokenStream) = match item {
        Item::Struct(s) => ("a struct", s.struct_token.to_token_stream()),
        Item::Enum(e) => ("an enum", e.enum_token.to_token_stream()),
        Item::Union(u) => ("a union", u.union_token.to_token_stream()),
        Item::Impl(i) => ("an `impl` block", i.impl_token.to_token_stream()),
        Item::Trait(t) => ("a trait", t.trait_token.to_token_stream()),
        Item::Mod(m) => ("a module", m.mod_token.to_token_stream()),
        Item::Const(c) => ("a constant", c.const_token.to_token_stream()),
        Item::Static(s) => ("a static", s.static_token.to_token_stream()),
        Item::Type(t) => ("a type alias", t.type_token.to_token_stream()),
        Item::Use(u) => ("a `use`", u.use_token.to_token_stream()),
        other => ("this item", other.to_token_stream()),
    };
    let message = format!("{ATTR} applies to an `async fn` handler, not to {what}");
    syn::Error::new_spanned(token, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn event_errors(event: TokenStream) -> Vec<String> {
        let item = quote!(async fn handle(event: #event) -> Result<(), E> { Ok(()) });
        match Handler::parse(&item) {
            Ok(_) => Vec::new(),
            Err(err) => err.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn events_must_be_owned() {
        assert!(
            event_errors(quote!(&str))[0]
                .contains("owned type, because it is stored and decoded later; use `String` instead of `&str`")
        );
        assert!(event_errors(quote!(&'static [u8]))[0].contains("like `Vec<u8>` instead of `&[u8]`"));
        assert!(event_errors(quote!(&Payment))[0].contains("take it by value, without `&`"));
        assert!(event_errors(quote!(Vec<&str>))[0].contains("use owned types in it"));
        assert!(event_errors(quote!(Payment<'_>))[0].contains("use owned types in it"));
        assert!(event_errors(quote!((u64, Cow<'a, str>)))[0].contains("use owned types in it"));
        for owned in [quote!(String), quote!(Cow<'static, str>), quote!([u8; 4]), quote!(Box<dyn Fn() + 'static>)] {
            assert_eq!(event_errors(owned.clone()), Vec::<String>::new(), "{owned}");
        }
    }
}
