//! Two handlers registered for one event type make `registry()` fail at start-up, naming both
//! handlers and their `file:line`. This is a test binary of its own so that its duplicate does
//! not poison the registry of other tests.
#![allow(clippy::unwrap_used, reason = "tests")]

mod first {
    #[dlq_core::dead_letter(event_type = "macros-duplicate")]
    pub(crate) async fn handle(amount: u64) -> Result<(), std::io::Error> {
        let _ = amount;
        Ok(())
    }
}

mod second {
    #[dlq_core::dead_letter(event_type = "macros-duplicate", max_retries = 1)]
    pub(crate) async fn handle(amount: u64) -> Result<(), std::io::Error> {
        let _ = amount;
        Ok(())
    }
}

fn site(module: &str) -> String {
    let source = include_str!("macros_duplicate.rs");
    let start = source.find(&format!("mod {module} ")).unwrap();
    let offset = source[start..].find("pub(crate) async fn handle").unwrap();
    // The prefix ends on the handler's line, so its line count is that line's number.
    let line = source[..start + offset].lines().count();
    format!("{}:{line}", file!())
}

#[test]
fn duplicate_event_type_names_both_handlers() {
    let err = dlq_core::handlers::registry().unwrap_err();
    let message = err.to_string();
    assert!(message.contains("`macros-duplicate`"), "{message}");
    assert!(message.contains("`macros_duplicate::first::handle`"), "{message}");
    assert!(message.contains("`macros_duplicate::second::handle`"), "{message}");
    assert!(message.contains(&site("first")), "{message}: {}", site("first"));
    assert!(message.contains(&site("second")), "{message}: {}", site("second"));
    // The first call's verdict is kept.
    assert_eq!(dlq_core::handlers::registry().unwrap_err().to_string(), message);
}

#[test]
fn explicit_list_reports_the_duplicate_too() {
    let err = dlq_core::handlers![first::handle, second::handle].unwrap_err();
    assert!(matches!(err, dlq_core::Error::DuplicateEventType { .. }), "{err}");
}
