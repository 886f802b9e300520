use dlq_core::Classify;

#[derive(Debug, Classify)]
enum PaymentError {
    #[dlq(retryable)]
    Timeout,
    #[dlq(transient, permanent)]
    Conflicting,
    #[dlq(fatal)]
    #[dlq(fatal)]
    Twice,
    #[dlq(crate = "::dlq_core")]
    OnVariant,
    #[dlq]
    Bare,
    #[dlq(permanent = true)]
    WithValue,
    Field(#[dlq(permanent)] u8),
}

#[derive(Classify)]
union Bits {
    raw: u32,
}

fn main() {}
