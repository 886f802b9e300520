//! End-to-end and UI tests of `dlq`; see `tests/`.

/// The README's Rust blocks, compiled as doctests so the front door cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
