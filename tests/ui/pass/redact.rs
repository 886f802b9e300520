//! `redact` alone, and beside `encrypt` and `clear`: the pointers reach the registration.

#[dlq_core::dead_letter(event_type = "ui-redact", redact = ["/card/number", "/customer/email", "/a~1b", "/items/0/pan"])]
async fn charge(payment: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = payment;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "ui-redact-sealed", encrypt = true, clear = ["/id", "/email"], redact = ["/email"])]
async fn refund(refund: serde_json::Value) -> Result<(), std::io::Error> {
    let _ = refund;
    Ok(())
}

fn main() {
    use dlq_core::handlers::Handler as _;
    assert_eq!(charge::registration().redact(), ["/card/number", "/customer/email", "/a~1b", "/items/0/pan"]);
    assert_eq!(refund::registration().redact(), ["/email"]);
}
