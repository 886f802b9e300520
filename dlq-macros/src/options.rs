//! Per-type options with a room of their own. Each module here holds one option of
//! `#[dead_letter]` whole: its key, how its value is read and checked, and what it adds to the
//! handler's registration. The attribute's parser meets it through one line of
//! `attr::ROOMS`; at run time the option lives in one module of `dlq_core` too (`redact`: in
//! `dlq_core::redact`, beside one field of the registration).
//!
//! A new per-type option of this kind is a new module here, a line in `attr::ROOMS`, its
//! module in `dlq_core` with a field of `Registration`, and its row in the attribute's docs
//! table (a test checks that every key has one).

use proc_macro2::TokenStream;

pub(crate) mod redact;

/// One per-type option, as the attribute's parser and the expansion see it.
pub(crate) trait Room: Sync {
    /// The key, as written: `redact`.
    fn key(&self) -> &'static str;

    /// A value for messages that suggest the fix: `["/card/number"]`.
    fn example(&self) -> &'static str;

    /// What the key takes, for messages: "an array of JSON pointers".
    fn takes(&self) -> &'static str;

    /// The value's tokens, read and checked; errors point at the offending token.
    ///
    /// # Errors
    /// What is wrong with the value, as the attribute reports it.
    fn read(&self, tokens: &TokenStream) -> syn::Result<TokenStream>;

    /// The registration expression `registration` with the option's value (what
    /// [`read`](Self::read) returned) applied, a constant expression; `krate` is the path of
    /// `dlq_core`.
    fn apply(&self, krate: &TokenStream, value: &TokenStream, registration: TokenStream) -> TokenStream;
}
