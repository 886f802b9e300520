//! Compile-time behaviour of `#[dead_letter]`, `#[derive(Classify)]` and `handlers!`:
//! `ui/pass` must compile warning-free, `ui/fail` must fail with the errors in its `.stderr`
//! files (regenerate with `TRYBUILD=overwrite` and review the diff).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
