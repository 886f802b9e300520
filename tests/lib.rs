//! End-to-end and UI tests of `dlq`; see `tests/`.

/// The README's Rust blocks, compiled as doctests so the front door cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guides' Rust blocks, one item per guide, compiled as doctests like the README's.
#[doc = include_str!("../docs/HANDLERS.md")]
#[cfg(doctest)]
pub struct HandlersGuideDoctests;

#[doc = include_str!("../docs/OUTAGES.md")]
#[cfg(doctest)]
pub struct OutagesGuideDoctests;

#[doc = include_str!("../docs/OPERATING.md")]
#[cfg(doctest)]
pub struct OperatingGuideDoctests;

#[doc = include_str!("../docs/CONSOLE.md")]
#[cfg(doctest)]
pub struct ConsoleGuideDoctests;

#[doc = include_str!("../docs/SENSITIVE.md")]
#[cfg(doctest)]
pub struct SensitiveGuideDoctests;

#[doc = include_str!("../docs/DEPLOYS.md")]
#[cfg(doctest)]
pub struct DeploysGuideDoctests;

#[doc = include_str!("../docs/BROKERS.md")]
#[cfg(doctest)]
pub struct BrokersGuideDoctests;
