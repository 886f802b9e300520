//! Explores one configuration and prints its state count, its time and what it reached:
//! `cargo run -p dlq-model --example states -- retries` (or `liveness`, `lost-commits`, `two-consumers`, `redrive`, `discard`,
//! `patch`, `retention`; none: the smallest).
use std::time::Instant;

use dlq_model::{Operation, Protocol};
use stateright::{Checker, Model};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let protocol = match which.as_str() {
        "retries" => Protocol::retries(),
        "redrive" => Protocol::operators(Operation::Redrive),
        "patch" => Protocol::operators(Operation::Patch),
        "discard" => Protocol::operators(Operation::Discard),
        "retention" => Protocol::retention(),
        "liveness" => Protocol::liveness(),
        "lost-commits" => Protocol::lost_commits(),
        "two-consumers" => Protocol::two_consumers(),
        _ => Protocol::smoke(),
    };
    let started = Instant::now();
    let checker = protocol.checker().threads(2).target_state_count(20_000_000).spawn_bfs().join();
    println!(
        "{which}: {} states, {} unique, depth {}, {:.1?}, done {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed(),
        checker.is_done()
    );
    for (name, path) in checker.discoveries() {
        println!("discovered {name}: {} steps", path.into_actions().len());
    }
}
