// Events are stored and decoded later: they cannot borrow. Each mistake is reported on its
// type, together with the others.
use std::borrow::Cow;

#[dlq_core::dead_letter(event_type = "note")]
async fn handle_str(note: &str) -> Result<(), std::io::Error> {
    let _ = note;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "bytes")]
async fn handle_bytes(bytes: &'static [u8]) -> Result<(), std::io::Error> {
    let _ = bytes;
    Ok(())
}

#[dlq_core::dead_letter(event_type = "pair", retries = 3)]
async fn handle_pair(pair: (u64, Cow<'_, str>)) -> Result<(), std::io::Error> {
    let _ = pair;
    Ok(())
}

// `Cow<'static, str>` deserializes owned: it is accepted.
#[dlq_core::dead_letter(event_type = "cow")]
async fn handle_cow(note: Cow<'static, str>) -> Result<(), std::io::Error> {
    let _ = note;
    Ok(())
}

fn main() {}
