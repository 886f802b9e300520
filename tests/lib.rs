//! End-to-end and UI tests of `dlq`; see `tests/`.
