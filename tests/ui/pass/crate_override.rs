//! `crate = "..."` names `dlq_core` when it is reached under another path.
#![deny(warnings)]

extern crate dlq_core as dlq;

mod reexport {
    pub(crate) use dlq_core as inner;
}

#[dlq::dead_letter(event_type = "renamed", crate = "::dlq")]
async fn renamed(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[dlq::dead_letter(event_type = "reexported", crate = "crate::reexport::inner")]
async fn reexported(amount: u64) -> Result<(), std::io::Error> {
    let _ = amount;
    Ok(())
}

#[derive(Debug, dlq::Classify)]
#[dlq(crate = "::dlq", permanent)]
enum Bad {
    Input,
}

fn main() {
    let set = dlq::handlers![renamed, reexported].unwrap();
    assert_eq!(set.len(), 2);
    assert_eq!(dlq::Classify::kind(&Bad::Input), "Bad::Input");
}
