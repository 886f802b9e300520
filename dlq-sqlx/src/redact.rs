//! Database URLs in messages, without their passwords.

use std::borrow::Cow;

/// What a masked password reads as.
const MASK: &str = "***";

/// `text` with the password of every URL in it replaced by `***`: the one in the userinfo
/// (`postgres://user:PASSWORD@host/db`) and a `password=` query parameter. For anything that
/// may show a `DATABASE_URL` (a start-up line, an error message, a log): the rest of the URL
/// (user, host, port, database) stays, so the message still says where it went.
///
/// ```
/// use dlq_sqlx::mask_passwords;
///
/// assert_eq!(mask_passwords("postgres://app:s3cr%40t@db:5432/app"), "postgres://app:***@db:5432/app");
/// assert_eq!(
///     mask_passwords("cannot open `postgres://app@db/app?sslmode=require&password=s3cret`"),
///     "cannot open `postgres://app@db/app?sslmode=require&password=***`"
/// );
/// assert_eq!(mask_passwords("postgres://app@db/app"), "postgres://app@db/app"); // none to mask
/// ```
pub fn mask_passwords(text: &str) -> Cow<'_, str> {
    let masked = mask_parameters(&mask_userinfo(text)).into_owned();
    if masked == text { Cow::Borrowed(text) } else { Cow::Owned(masked) }
}

/// Where a URL's authority (or a query value) ends in running text: what cannot stand in
/// it unencoded, and the quotes and brackets messages put around a URL.
fn ends_url_part(c: char) -> bool {
    c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>')
}

/// Masks `user:PASSWORD@` after every `://`.
fn mask_userinfo(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut done = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        // The userinfo may hold `/`, `?` or `#` only percent-encoded; a `[` opens an IPv6
        // host, after any userinfo. So it ends at the last `@` before the authority ends.
        let rest = &text[start..];
        let authority = &rest[..rest.find(ends_url_part).unwrap_or(rest.len())];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
        {
            out.push_str(&text[done..start + colon + 1]);
            out.push_str(MASK);
            done = start + at;
        }
        from = start.max(done);
    }
    if done == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

/// Masks the value of every `?password=` or `&password=` parameter.
fn mask_parameters(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut done = 0;
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password=") {
        let key = from + found;
        let start = key + "password=".len();
        from = start;
        if !matches!(text[..key].chars().next_back(), Some('?' | '&')) {
            continue;
        }
        let rest = &text[start..];
        let end = rest.find(|c: char| c == '&' || ends_url_part(c)).unwrap_or(rest.len());
        out.push_str(&text[done..start]);
        out.push_str(MASK);
        done = start + end;
    }
    if done == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_password_is_masked_and_nothing_else() {
        for (text, want) in [
            ("postgres://u:s3cret@127.0.0.1:5432/db", "postgres://u:***@127.0.0.1:5432/db"),
            ("postgresql://u:p@ss@[::1]:5432/db?sslmode=require", "postgresql://u:***@[::1]:5432/db?sslmode=require"),
            ("postgres://u:s3cret@host", "postgres://u:***@host"),
            ("sqlite://u:s3cret@/tmp/x.db", "sqlite://u:***@/tmp/x.db"),
            ("at postgres://a:1@h/d and postgres://b:2@h/d.", "at postgres://a:***@h/d and postgres://b:***@h/d."),
            (
                "postgres://h/d?user=u&password=s3cret&sslmode=disable",
                "postgres://h/d?user=u&password=***&sslmode=disable",
            ),
            ("postgres://h/d?PASSWORD=s3cret", "postgres://h/d?PASSWORD=***"),
            ("invalid value 'postgres://u:é€@h/d' for", "invalid value 'postgres://u:***@h/d' for"),
            ("postgres://u@h:5432/d", "postgres://u@h:5432/d"),
            ("postgres://h:5432/d", "postgres://h:5432/d"),
            ("the password=field of a form", "the password=field of a form"),
            ("no url at all: a@b:c", "no url at all: a@b:c"),
            ("://", "://"),
            ("postgres://u:", "postgres://u:"),
        ] {
            assert_eq!(mask_passwords(text), want, "{text}");
        }
        assert!(matches!(mask_passwords("postgres://u@h/d"), Cow::Borrowed(_)));
    }
}
