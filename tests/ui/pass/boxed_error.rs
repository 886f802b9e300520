//! A handler may return `Box<dyn Error + Send + Sync>` (or an alias of `Result`, like
//! `anyhow::Result<T>`): it is classified by the defaults and its source chain.
#![deny(warnings)]

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type AppResult<T> = Result<T, BoxError>;

#[dlq_core::dead_letter(event_type = "boxed")]
async fn boxed(amount: i64) -> Result<(), BoxError> {
    if amount < 0 {
        return Err("negative amount".into());
    }
    Ok(())
}

#[dlq_core::dead_letter(event_type = "aliased")]
async fn aliased(amount: i64) -> AppResult<i64> {
    Ok(amount * 2)
}

fn main() {
    let _ = (boxed(1), aliased(2));
}
