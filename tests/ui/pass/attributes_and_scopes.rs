//! The handler keeps its attributes (docs, lint levels, `cfg`), may be declared inside a
//! function, and registers even when only the registry ever runs it.
#![deny(warnings)]

/// Never called directly: only the registry runs it, so it must not be reported as dead code.
#[dlq_core::dead_letter(event_type = "only-dispatched")]
async fn only_dispatched(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

/// `expect` is honoured on the body without an unfulfilled expectation on the wrapper.
#[expect(unused_variables, reason = "the test needs an unused variable")]
#[dlq_core::dead_letter(event_type = "expect")]
async fn with_expect(amount: u64) -> Result<(), std::io::Error> {
    let unused = 1;
    let _ = amount;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "cfg-off")]
#[cfg(any())]
async fn compiled_out(amount: u64) -> Result<(), std::io::Error> {
    Ok(())
}

/// Its rows are stored under the keyed hash of the payload's `/customer/id`.
#[dlq_core::dead_letter(event_type = "with-subject", subject = "/customer/id")]
async fn with_subject(payment: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = payment;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "raw-ident")]
async fn r#match(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

fn main() {
    #[dlq_core::dead_letter(event_type = "local")]
    async fn local(local: u64) -> Result<(), std::io::Error> {
        // An argument named like its handler does not hide the generated type.
        let _ = local;
        Ok(())
    }

    let set = dlq_core::handlers![local, with_expect, r#match].unwrap();
    assert_eq!(set.len(), 3);
    let reg = set.get("raw-ident").unwrap();
    assert!(reg.handler().ends_with("::match"), "{}", reg.handler());
    let _ = with_expect(1);
}
