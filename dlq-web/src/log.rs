//! The console's log lines (through `tracing`, target `dlq_web`): one per action, naming the
//! verb, what it acted on (rows, a group, an operation) and the operator, and one per answer
//! of 5xx with the operator and why. Every string in them may come from outside (a reason, a
//! fingerprint, a header naming the actor, a store's error about a hostile row): each is cut to
//! [`MAX_CHARS`] characters and its control characters (a terminal's escapes, line breaks
//! that would forge a log line) and bidi overrides are shown as `.`.

/// The most characters of one string in a log line.
pub(crate) const MAX_CHARS: usize = 200;

/// `text` as a log line may hold it: bounded, no control character, no bidi override.
pub(crate) fn clean(text: &str) -> String {
    let neutral = |c: char| if c.is_control() || crate::view::hazard(c) { '.' } else { c };
    let mut out: String = text.chars().take(MAX_CHARS).map(neutral).collect();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// An action done: `verb` (redrive, discard, patch, edit, undo, resume), on `subject` (`3 rows
/// of group …`, `operation 12`, `row 7`), by `actor`, for `reason`.
pub(crate) fn action(verb: &str, subject: &str, actor: &str, reason: &str) {
    tracing::info!(
        target: "dlq_web",
        verb,
        subject = %clean(subject),
        actor = %clean(actor),
        reason = %clean(reason),
        "console action"
    );
}

/// A request answered with a server error.
pub(crate) fn server_error(status: u16, method: &str, path: &str, actor: &str, why: &str) {
    tracing::error!(
        target: "dlq_web",
        status,
        method = %clean(method),
        path = %clean(path),
        actor = %clean(actor),
        error = %clean(why),
        "console request failed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_strings_are_bounded_and_neutral() {
        assert_eq!(clean("alice"), "alice");
        assert_eq!(clean("a\nb\r\u{1b}[2J\u{9b}c\u{202E}d\u{0}"), "a.b..[2J.c.d.");
        let long = "é".repeat(MAX_CHARS + 5);
        let cut = clean(&long);
        assert_eq!((cut.chars().count(), cut.ends_with('…')), (MAX_CHARS + 1, true));
        assert_eq!(clean(&"x".repeat(MAX_CHARS)).chars().count(), MAX_CHARS, "not cut at the limit");
    }
}
