//! The CLI's filters in the URL: `?status=&event_type=&group=&kind=&reason=&since=&until=&after=&order=&limit=`.

use chrono::{DateTime, Utc};
use dlq_core::{ListFilter, Status, admin::Order};

use crate::error::Failure;

/// The keys a list URL accepts.
const KEYS: &[&str] =
    &["status", "event_type", "group", "fingerprint", "kind", "reason", "since", "until", "after", "order", "limit"];

/// The most rows one page shows.
pub(crate) const MAX_LIMIT: usize = 500;
/// Rows per page unless `limit` says otherwise.
pub(crate) const DEFAULT_LIMIT: usize = 50;

/// Parses query pairs into a filter; empty values are ignored (a GET form sends every field).
/// The values matched as text (`event_type`, `group`, `kind`, `reason`) are taken exactly as
/// they are, spaces included, so that a link to a type or group with spaces at its ends finds
/// it; the others are trimmed. Unknown keys and malformed values are a 400 that says what was
/// expected.
pub(crate) fn parse(pairs: &[(String, String)]) -> Result<ListFilter, Failure> {
    let mut filter = ListFilter::default().limit(DEFAULT_LIMIT);
    for (key, exact) in pairs {
        let value = exact.trim();
        if exact.is_empty() || key == "token" {
            continue;
        }
        match key.as_str() {
            "event_type" => filter.event_type = Some(exact.clone()),
            "group" | "fingerprint" => filter.fingerprint = Some(exact.clone()),
            "kind" => filter.kind = Some(exact.clone()),
            "reason" => filter.reason = Some(exact.clone()),
            _ if value.is_empty() => {}
            "status" => filter.status = Some(status(value)?),
            "since" => filter.since = Some(when(key, value)?),
            "until" => filter.until = Some(when(key, value)?),
            "after" => {
                filter.after = Some(value.parse().map_err(|_| {
                    Failure::bad_request(format!("malformed filter: after=`{value}` is not a row id (a number)"))
                })?);
            }
            "order" => {
                filter.order = match value {
                    "newest" => Order::NewestFirst,
                    "oldest" => Order::OldestFirst,
                    _ => {
                        return Err(Failure::bad_request(format!(
                            "malformed filter: order=`{value}`: expected newest or oldest"
                        )));
                    }
                }
            }
            "limit" => filter.limit = limit(value)?,
            other => {
                return Err(Failure::bad_request(format!(
                    "unknown filter `{other}`: expected one of {}",
                    KEYS.join(", ")
                )));
            }
        }
    }
    Ok(filter)
}

fn status(value: &str) -> Result<Status, Failure> {
    value.to_ascii_uppercase().parse::<Status>().map_err(|_| {
        let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        Failure::bad_request(format!("malformed filter: status=`{value}`: expected one of {}", names.join(", ")))
    })
}

fn limit(value: &str) -> Result<usize, Failure> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(Failure::bad_request(format!(
            "malformed filter: limit=`{value}`: expected a number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// A duration ago (`2h`, `30m`) or an RFC 3339 time, as the CLI's `--since`.
fn when(key: &str, value: &str) -> Result<DateTime<Utc>, Failure> {
    if let Ok(at) = DateTime::parse_from_rfc3339(value) {
        return Ok(at.with_timezone(&Utc));
    }
    let bad = || {
        Failure::bad_request(format!(
            "malformed filter: {key}=`{value}` is neither a duration (2h, 30m) nor an RFC 3339 time (2026-05-01T10:00:00Z)"
        ))
    };
    let ago = humantime::parse_duration(value).map_err(|_| bad())?;
    let ago = chrono::Duration::from_std(ago).map_err(|_| bad())?;
    Utc::now().checked_sub_signed(ago).ok_or_else(bad)
}

/// The query string of `filter` (without `after`), for links: shareable, and the base of the
/// next page's link.
pub(crate) fn query(filter: &ListFilter) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut push = |key, value: Option<String>| {
        if let Some(v) = value {
            out.push((key, v));
        }
    };
    push("status", filter.status.map(|s| s.as_str().to_owned()));
    push("event_type", filter.event_type.clone());
    push("group", filter.fingerprint.clone());
    push("kind", filter.kind.clone());
    push("reason", filter.reason.clone());
    push("since", filter.since.map(|t| t.to_rfc3339()));
    push("until", filter.until.map(|t| t.to_rfc3339()));
    push("order", (filter.order == Order::OldestFirst).then(|| "oldest".to_owned()));
    push("limit", (filter.limit != DEFAULT_LIMIT).then(|| filter.limit.to_string()));
    out
}

/// `pairs` as a URL query (`a=1&b=2`), escaped.
pub(crate) fn encode(pairs: &[(&str, String)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn filters_parse_and_round_trip() {
        let f = parse(&pairs(&[
            ("status", "failed_permanently"),
            ("group", "ab12"),
            ("order", "oldest"),
            ("limit", "20"),
            ("kind", ""),
        ]))
        .unwrap();
        assert_eq!(f.status, Some(Status::FailedPermanently));
        assert_eq!(f.fingerprint.as_deref(), Some("ab12"));
        assert_eq!(f.kind, None);
        assert_eq!(encode(&query(&f)), "status=FAILED_PERMANENTLY&group=ab12&order=oldest&limit=20");
    }

    #[test]
    fn text_values_round_trip_exactly() {
        let f = parse(&pairs(&[("event_type", " pay ment "), ("group", " "), ("status", " pending "), ("limit", " ")]))
            .unwrap();
        assert_eq!((f.event_type.as_deref(), f.fingerprint.as_deref()), (Some(" pay ment "), Some(" ")));
        assert_eq!((f.status, f.limit), (Some(Status::Pending), DEFAULT_LIMIT));
        let back: Vec<(String, String)> = serde_urlencoded::from_str(&encode(&query(&f))).unwrap();
        assert_eq!(parse(&back).unwrap().event_type.as_deref(), Some(" pay ment "));
    }

    #[test]
    fn malformed_filters_say_what_was_expected() {
        let e = parse(&pairs(&[("status", "LOST")])).unwrap_err();
        assert!(e.message.contains("FAILED_PERMANENTLY"), "{}", e.message);
        assert!(parse(&pairs(&[("since", "yesterday")])).unwrap_err().message.contains("RFC 3339"));
        assert!(parse(&pairs(&[("limit", "0")])).unwrap_err().message.contains("1 to 500"));
        assert!(parse(&pairs(&[("colour", "red")])).unwrap_err().message.contains("unknown filter `colour`"));
        assert!(parse(&pairs(&[("after", "x")])).is_err());
    }
}
