//! The optional capped claims ([`CappedClaimStore`], offered by [`QueueStore::capped_claims`]).

use super::*;

/// Capped claims are offered, and `claim_capped` takes no more than the cap leaves: rows of the type under a live lease count against
/// `in_flight`, and rows taken by capped claims within the window count against `starts`,
/// whoever claimed them; other types are not touched.
pub async fn claim_capped_keeps_the_cap<S: DeadLetterStore + ?Sized>(s: &S) {
    let capped_store = s
        .capped_claims()
        .expect("QueueStore::capped_claims offers capped claims: list `capped_claims` only for a store that has them");
    for n in 0..12 {
        park(s, letter("capped", n)).await;
    }
    park(s, letter("other", 1)).await;
    let held = ClaimCap { in_flight: Some(3), starts: None };
    let capped = |limit: usize, cap: ClaimCap| {
        capped_store.claim_capped(request(&["capped", "other"], limit, LONG, "conformance"), cap)
    };
    let first = capped(10, held).await.expect("capped claim");
    assert_eq!(first.len(), 3, "three may be in flight");
    assert!(first.iter().all(|c| c.event_type == "capped"), "only the request's first type");
    assert!(capped(10, held).await.expect("capped claim").is_empty(), "three are held");
    // A plain claim of another retrier counts too.
    assert_eq!(s.claim(request(&["capped"], 1, LONG, "another")).await.expect("claim").len(), 1);
    let wider = ClaimCap { in_flight: Some(5), starts: None };
    assert_eq!(capped(10, wider).await.expect("capped claim").len(), 1, "four held, five allowed");
    // Settled rows free their slots.
    let done = first.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
    assert_eq!(s.settle(done).await.expect("settle").applied, 3);
    // The rate: two claims within the window share its starts; no cap on slots.
    let rate = ClaimCap { in_flight: None, starts: Some((4, Duration::from_secs(3600))) };
    assert_eq!(capped(3, rate).await.expect("capped claim").len(), 3);
    assert_eq!(capped(3, rate).await.expect("capped claim").len(), 1, "4 per window, 3 taken");
    assert!(capped(3, rate).await.expect("capped claim").is_empty());
    // A window that has passed counts nothing.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let short = ClaimCap { in_flight: None, starts: Some((4, Duration::from_millis(20))) };
    assert_eq!(capped(3, short).await.expect("capped claim").len(), 3, "the earlier claims are out of the window");
}
