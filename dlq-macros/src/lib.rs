//! Procedural macros for `dlq`; use them through `dlq_core`.
use proc_macro::TokenStream;

/// Placeholder while the macro crate is being written.
#[proc_macro_attribute]
pub fn dead_letter(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Placeholder while the macro crate is being written.
#[proc_macro_derive(Classify, attributes(dlq))]
pub fn derive_classify(_item: TokenStream) -> TokenStream {
    TokenStream::new()
}
