//! Collecting errors so that all of them are reported at once.

/// Errors found so far, combined into one `syn::Error` (each keeps its own span).
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records `err`.
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    /// `Ok` when nothing was recorded.
    ///
    /// # Errors
    /// The recorded errors, combined.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
