//! Generating the upcast chain of `#[dead_letter(version = N, upcast = [...])]`: each named
//! function erased to JSON for the registration, and a function never called whose body the
//! compiler checks: every name is an upcaster, each takes what the one before it returns, and
//! the last returns the handler's event. Errors land on the name of the link at fault.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{format_ident, quote};
use syn::spanned::Spanned;

use crate::attr::Args;
use crate::expand::{Paths, respan};
use crate::handler::Handler;

/// The registration's chain: `&[Self::__dlq_upcast_0, ...]`, empty without `upcast`.
pub(crate) fn chain(args: &Args) -> TokenStream {
    let links = (0..args.upcast.len()).map(|i| {
        let name = format_ident!("__dlq_upcast_{}", i);
        quote!(Self::#name)
    });
    quote!(&[#(#links),*])
}

/// The erased links, in the handler type's inherent impl: `__dlq_upcast_i` runs link `i` on
/// the JSON of version `i + 1`.
pub(crate) fn links(paths: &Paths, args: &Args) -> TokenStream {
    let p = &paths.private;
    let fns = args.upcast.iter().enumerate().map(|(i, path)| {
        let name = format_ident!("__dlq_upcast_{}", i);
        let link = respan(quote!(#p::Link::of), path.span());
        quote! {
            fn #name(__dlq_value: #p::Value) -> #p::Result<#p::Value, #p::UpcastError> {
                #link(#path).run(__dlq_value)
            }
        }
    });
    quote!(#(#fns)*)
}

/// `__dlq_schemas`, in the handler type's inherent impl: the JSON Schema of the handler's event
/// (its version) and of each link's input type (the version before it), for the types that
/// implement `schemars::JsonSchema` (autoref specialization: the others give none).
pub(crate) fn schemas(paths: &Paths, args: &Args, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let event = &handler.event.ty;
    let version = proc_macro2::Literal::u32_unsuffixed(args.version);
    let older = args.upcast.iter().enumerate().map(|(i, path)| {
        // Link `i` takes version `i + 1` (the chain starts at version 1).
        let version = proc_macro2::Literal::usize_unsuffixed(i + 1);
        let link = respan(quote!(#p::Link::of), path.span());
        quote!((#version, (&&#p::SchemaProbe::input(&#link(#path))).__dlq_schema()))
    });
    quote! {
        fn __dlq_schemas() -> #p::Schemas {
            use #p::{ViaJsonSchema as _, ViaNoSchema as _};
            #p::schemas([(#version, (&&#p::SchemaProbe::<#event>::new()).__dlq_schema()), #(#older),*])
        }
    }
}

/// The chain's compile-time check, beside the handler's other assertions.
pub(crate) fn check(paths: &Paths, args: &Args, handler: &Handler) -> TokenStream {
    let p = &paths.private;
    let Some(last) = args.upcast.len().checked_sub(1) else {
        return TokenStream::new();
    };
    let name = |i: usize| format_ident!("__dlq_link{}", i);
    let lets = args.upcast.iter().enumerate().map(|(i, path)| {
        let (var, link) = (name(i), respan(quote!(#p::Link::of), path.span()));
        quote!(let #var = #link(#path);)
    });
    // The `use` of the tiers keeps the macro's span: only the method the types pick is used,
    // and an unused import on the user's token would be reported there.
    let tiers = quote!(use #p::{ViaFromJson as _, ViaMismatch as _, ViaSame as _, ViaToJson as _};);
    let joins = args.upcast.iter().enumerate().skip(1).map(|(i, path)| {
        let (before, after) = (name(i - 1), name(i));
        let pair = at(path.span(), quote!(#p::Pair::of(&#before, &#after)));
        let (call, tier) = (at(path.span(), quote!(#p::joins)), at(path.span(), quote!((&&&#pair).__dlq_joins())));
        let block = block(path.span(), quote!(#tiers #tier));
        quote!(#call(&#pair, #block);)
    });
    let (last_var, event) = (name(last), &handler.event.ty);
    let span = args.upcast[last].span();
    let pair = at(span, quote!(#p::Pair::last(&#last_var, #p::PhantomData::<#event>)));
    let (call, tier) = (at(span, quote!(#p::ends)), at(span, quote!((&&&#pair).__dlq_joins())));
    let block = block(span, quote!(#tiers #tier));
    let ends = quote!(#call(&#pair, #block););
    quote! {
        #[allow(dead_code, reason = "never called: the compiler checks that the upcast chain joins up")]
        fn __dlq_upcast_chain() {
            #(#lets)*
            #(#joins)*
            #ends
        }
    }
}

/// `{ tokens }` with its braces on `span`: an error about the block's value lands there.
fn block(span: Span, tokens: TokenStream) -> Group {
    let mut group = Group::new(Delimiter::Brace, tokens);
    group.set_span(span);
    group
}

/// `tokens` with every token on `span` (the user's name of the link at fault).
fn at(span: Span, tokens: TokenStream) -> TokenStream {
    respan(tokens, span)
}
