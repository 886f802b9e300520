//! A handler in a module that shadows every prelude name generated code could use compiles
//! warning-free under strict lints: generated code names everything by absolute path.
#![deny(warnings, unused_qualifications, missing_docs, unreachable_pub)]

mod shadowing {
    #![allow(dead_code, unused_macros, reason = "the shadows are never used")]

    pub(crate) struct Option;
    pub(crate) struct Result;
    pub(crate) struct Box;
    pub(crate) struct Pin;
    pub(crate) struct Ok;
    pub(crate) struct Err;
    pub(crate) struct Some;
    pub(crate) struct None;
    pub(crate) struct Vec;
    pub(crate) struct String;
    pub(crate) struct Send;
    pub(crate) struct Duration;
    pub(crate) struct Clone;
    pub(crate) struct From;
    pub(crate) struct Into;
    pub(crate) struct Default;
    pub(crate) struct Future;
    macro_rules! concat {
        () => {};
    }
    macro_rules! line {
        () => {};
    }
    macro_rules! file {
        () => {};
    }
    macro_rules! module_path {
        () => {};
    }

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Payment {
        pub(crate) id: u64,
    }

    /// Books a payment.
    #[dlq_core::dead_letter(
        event_type = "shadowed",
        version = 2,
        upcast = [::dlq_core::handlers::unchanged],
        max_retries = 100_000,
        backoff = "linear",
        base = "250ms",
        max = "7d",
        jitter = 0.3,
        max_age = "30d",
        timeout = "1m",
        breaker = "50% of 20 in 1m",
        encrypt = true,
        clear = ["/id"]
    )]
    pub(crate) async fn handle(payment: Payment) -> core::result::Result<u64, std::io::Error> {
        core::result::Result::Ok(payment.id)
    }
}

fn main() {
    let handlers = dlq_core::handlers![shadowing::handle].unwrap();
    assert_eq!(handlers.len(), 1);
    let _ = shadowing::handle(shadowing::Payment { id: 1 });
}
