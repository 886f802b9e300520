#[derive(serde::Serialize, serde::Deserialize)]
struct Payment {
    cents: i64,
}

fn v1_to_v2(p: serde_json::Value) -> Result<serde_json::Value, dlq_core::handlers::UpcastError> {
    Ok(p)
}

#[dlq_core::dead_letter(event_type = "payment", version = 3, upcast = [v1_to_v2])]
async fn gap(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.cents;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "refund", version = 2)]
async fn no_chain(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.cents;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "invoice", upcast = [v1_to_v2])]
async fn no_version(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.cents;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "receipt", version = 2, upcast = v1_to_v2)]
async fn not_a_list(payment: Payment) -> Result<(), std::io::Error> {
    let _ = payment.cents;
    Ok(())
}

fn main() {}
