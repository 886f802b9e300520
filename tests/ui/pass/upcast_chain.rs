//! A handler with an upcast chain of typed links, a link on the JSON and `unchanged` compiles
//! warning-free under strict lints, and registers its version and chain.
#![deny(warnings, unused_qualifications, missing_docs, unreachable_pub)]

mod payments {
    use dlq_core::handlers::UpcastError;
    use serde_json::Value;

    #[derive(serde::Serialize, serde::Deserialize)]
    pub(crate) struct PaymentV1 {
        pub(crate) cents: i64,
    }

    /// The current event.
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Payment {
        pub(crate) amount_cents: i64,
        pub(crate) currency: String,
    }

    fn v1_to_v2(p: PaymentV1) -> Result<Value, UpcastError> {
        Ok(serde_json::json!({ "cents": p.cents, "currency": "EUR" }))
    }

    fn v2_to_v3(mut v: Value) -> Result<Value, UpcastError> {
        let cents = v.get("cents").cloned().ok_or_else(|| UpcastError::new("no `cents`"))?;
        v["amount_cents"] = cents;
        Ok(v)
    }

    fn v4_to_v5(p: Payment) -> Result<Payment, UpcastError> {
        Ok(p)
    }

    /// Books a payment.
    #[dlq_core::dead_letter(
        event_type = "payment",
        version = 5,
        upcast = [v1_to_v2, v2_to_v3, dlq_core::handlers::unchanged, v4_to_v5]
    )]
    pub(crate) async fn handle(payment: Payment) -> Result<i64, std::io::Error> {
        let _ = &payment.currency;
        Ok(payment.amount_cents)
    }
}

fn main() {
    let reg = <payments::handle as dlq_core::handlers::Handler>::registration();
    assert_eq!((reg.version(), reg.upcasters()), (5, 4));
}
