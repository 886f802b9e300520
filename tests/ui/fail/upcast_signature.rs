use dlq_core::handlers::UpcastError;

#[derive(serde::Serialize, serde::Deserialize)]
struct PaymentV1 {
    cents: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PaymentV2 {
    cents: i64,
    currency: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Payment {
    amount_cents: i64,
    currency: String,
}

/// Returns the event itself, not a `Result`.
fn infallible(p: PaymentV1) -> PaymentV2 {
    PaymentV2 { cents: p.cents, currency: "EUR".into() }
}

fn v1_to_v2(p: PaymentV1) -> Result<PaymentV2, UpcastError> {
    Ok(PaymentV2 { cents: p.cents, currency: "EUR".into() })
}

fn v2_to_v3(p: PaymentV2) -> Result<Payment, UpcastError> {
    Ok(Payment { amount_cents: p.cents, currency: p.currency })
}

#[dlq_core::dead_letter(event_type = "payment", version = 2, upcast = [infallible])]
async fn not_an_upcaster(payment: PaymentV2) -> Result<(), std::io::Error> {
    let _ = payment.cents;
    Ok(())
}

/// The second link takes `PaymentV2`, but the first returns `Payment`.
#[dlq_core::dead_letter(event_type = "refund", version = 3, upcast = [v2_to_v3, v2_to_v3])]
async fn links_out_of_order(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.amount_cents;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "invoice", version = 2, upcast = [v1_to_v2])]
async fn ends_elsewhere(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.amount_cents;
    Ok(())
}

fn main() {}
