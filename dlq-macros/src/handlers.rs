//! `handlers![a, b::c]`: a registry of exactly the named handlers, each checked by the compiler.
//!
//! `#[dead_letter]` gives each handler a type of the same name that implements `Handler`, and a
//! plain function has no such type. Naming `<f as Handler>` directly would fail on a plain
//! function with "expected type, found function"; instead each path is imported under an alias
//! beside a glob import of a stand-in type named like the function. An explicit import shadows
//! a glob in the namespaces it fills, so the alias is the handler's type when there is one, and
//! the stand-in otherwise, which fails with `Handler`'s own message, "`f` is not a
//! `#[dead_letter]` handler", on the user's token.

use proc_macro2::{TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Path, Token};

/// What `dlq_core::handlers!` forwards: `$crate; path, path, ...`.
struct Input {
    /// The path of `dlq_core`, as `$crate` names it.
    krate: TokenStream,
    handlers: Punctuated<Path, Token![,]>,
}

// The accepted grammar:
//
//   input := CRATE ";" (path ("," path)* ","?)?
//   path  := a path without generic arguments, like `handle_payment` or `crate::refunds::handle`
impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let krate = input.step(|cursor| {
            let mut krate = TokenStream::new();
            let mut rest = *cursor;
            while let Some((tt, next)) = rest.token_tree() {
                if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ';') {
                    return Ok((krate, next));
                }
                krate.extend([tt]);
                rest = next;
            }
            Err(cursor.error("expected `;` after the path of `dlq_core`"))
        })?;
        let handlers = Punctuated::parse_terminated_with(input, |input| {
            Path::parse_mod_style(input).map_err(|err| {
                let message = "`handlers!` takes paths to `#[dead_letter]` handlers, like `handlers![handle_payment, refunds::handle_refund]`";
                syn::Error::new(err.span(), message)
            })
        })?;
        Ok(Self { krate, handlers })
    }
}

/// Expands `dlq_core::handlers![...]`.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<Input>(input) {
        Ok(Input { krate, handlers }) => {
            let registrations = handlers.iter().map(|path| registration(&krate, path));
            quote!(#krate::handlers::Registry::from_registrations([#(#registrations),*]))
        }
        Err(err) => err.into_compile_error(),
    }
}

/// `&'static Registration` of the handler at `path`, or an error on its last segment.
fn registration(krate: &TokenStream, path: &Path) -> TokenStream {
    let Some(last) = path.segments.last() else {
        return syn::Error::new(path.span(), "expected a path to a handler").into_compile_error();
    };
    let name = &last.ident;
    let path = path.to_token_stream();
    quote_spanned! {name.span()=>
        {
            #[allow(
                dead_code,
                non_camel_case_types,
                unreachable_pub,
                unused_imports,
                reason = "a stand-in for a name that is not a handler"
            )]
            mod __dlq_fallback {
                mod stand_in {
                    pub struct #name;
                }
                pub use stand_in::#name as __dlq_handler;
            }
            #[allow(unused_imports, reason = "used only when the path is not a handler")]
            use __dlq_fallback::*;
            #[allow(unused_imports, reason = "unused only when the path is not a handler, which fails")]
            use #path as __dlq_handler;
            <__dlq_handler as #krate::handlers::Handler>::registration()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_each_path_beside_a_stand_in_named_like_it() {
        let out = expand(quote!(::dlq_core; handle_payment, refunds::handle_refund,)).to_string();
        assert!(out.starts_with(":: dlq_core :: handlers :: Registry :: from_registrations (["), "{out}");
        assert!(out.contains("pub struct handle_refund ;"), "{out}");
        assert!(out.contains("use refunds :: handle_refund as __dlq_handler ;"), "{out}");
        assert_eq!(
            out.matches("< __dlq_handler as :: dlq_core :: handlers :: Handler > :: registration ()").count(),
            2,
            "{out}"
        );
    }

    #[test]
    fn rejects_what_is_not_a_path() {
        let out = expand(quote!(::dlq_core; handle_payment, "refund")).to_string();
        assert!(out.contains("`handlers!` takes paths to `#[dead_letter]` handlers"), "{out}");
        let out = expand(quote!(::dlq_core; Vec::<u8>)).to_string();
        assert!(out.contains("compile_error"), "{out}");
    }
}
