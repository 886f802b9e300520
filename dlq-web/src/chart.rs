//! `GET /charts/parked.svg?window=24h|7d`: rows parked per bucket and event type, as a
//! server-rendered SVG line chart (an `<img>` on the overview, so the page itself stays one
//! stats query). One grouped query draws a chart
//! ([`ReadStore::created_histogram`](dlq_core::store::ReadStore::created_histogram)).

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use chrono::{DateTime, TimeDelta, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::Failure;

/// At most this many event types get a line (the largest in the window).
const MAX_TYPES: usize = 6;
const COLOURS: [&str; MAX_TYPES] = ["#2f5bd3", "#b42318", "#067647", "#b54708", "#6941c6", "#0e7090"];
const W: f64 = 720.0;
const H: f64 = 220.0;
const PAD: f64 = 36.0;
/// Room above the plot for the title and the legend.
const TOP: f64 = 50.0;

/// The chart's window.
#[derive(Debug, Deserialize)]
pub(crate) struct Window {
    window: Option<String>,
}

/// Buckets of a window: 24 of an hour, or 28 of six hours for 7 days.
fn buckets(window: Option<&str>) -> Result<(usize, TimeDelta, &'static str), Failure> {
    match window.unwrap_or("24h") {
        "24h" => Ok((24, TimeDelta::hours(1), "per hour, last 24 h")),
        "7d" => Ok((28, TimeDelta::hours(6), "per 6 hours, last 7 days")),
        other => Err(Failure::bad_request(format!("window=`{other}`: expected 24h or 7d"))),
    }
}

/// How long a drawn chart is reused (a snapshot, as the overview's figures): the overview
/// refreshes itself every 30 s, and a drawing reads every row created in its window.
const REUSE: std::time::Duration = std::time::Duration::from_secs(300);

/// `GET /charts/parked.svg`.
pub(crate) async fn parked(
    State(console): State<Console>,
    Query(window): Query<Window>,
) -> Result<impl IntoResponse, Failure> {
    let (n, step, title) = buckets(window.window.as_deref())?;
    let drawer = console.clone();
    let compute = || async move { draw(&drawer, n, step, title).await };
    let (svg, _) = console.snapshots.get(format!("chart:{title}"), REUSE, compute).await?;
    let svg = String::clone(&svg);
    Ok(([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "private, max-age=60")], svg))
}

async fn draw(console: &Console, n: usize, step: TimeDelta, title: &'static str) -> Result<String, Failure> {
    let store = console.admin.store();
    // Buckets on whole hours, the last one the hour under way: a store can answer those from
    // hourly counts (PostgreSQL does) instead of reading every row of the window.
    let now = Utc::now().timestamp();
    let end = DateTime::from_timestamp(now - now.rem_euclid(3600) + 3600, 0).unwrap_or_else(Utc::now);
    let start = end - step * i32::try_from(n).unwrap_or(24);
    let buckets =
        store.created_histogram(start, step.to_std().unwrap_or_default(), u32::try_from(n).unwrap_or(24)).await?;
    let mut totals = std::collections::BTreeMap::<&str, u64>::new();
    for b in &buckets {
        *totals.entry(b.event_type.as_str()).or_insert(0) += b.count;
    }
    let mut types: Vec<(&str, u64)> = totals.into_iter().collect();
    types.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    types.truncate(MAX_TYPES);
    let series = types
        .iter()
        .map(|(event_type, _)| {
            let mut points = vec![0; n];
            for b in buckets.iter().filter(|b| b.event_type == *event_type) {
                if let Some(point) = points.get_mut(b.bucket as usize) {
                    *point = b.count;
                }
            }
            ((*event_type).to_owned(), points)
        })
        .collect::<Vec<_>>();
    Ok(render(title, start, step, &series).into_string())
}

/// The line chart: one polyline per event type, a legend, the peak on the y axis.
fn render(title: &str, start: DateTime<Utc>, step: TimeDelta, series: &[(String, Vec<u64>)]) -> Markup {
    let n = series.first().map_or(0, |(_, p)| p.len()).max(2);
    let peak = series.iter().flat_map(|(_, p)| p.iter().copied()).max().unwrap_or(0).max(1);
    #[allow(clippy::cast_precision_loss, reason = "chart coordinates")]
    let x = |i: usize| PAD + (W - 2.0 * PAD) * i as f64 / (n - 1) as f64;
    #[allow(clippy::cast_precision_loss, reason = "chart coordinates")]
    let y = |v: u64| H - PAD - (H - PAD - TOP) * v as f64 / peak as f64;
    let end = start + step * i32::try_from(n).unwrap_or(0);
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {W} {H}")) width=(W) height=(H) font-family="sans-serif" font-size="11" {
            rect width=(W) height=(H) fill="#fff" {}
            text x=(PAD) y="16" font-size="13" fill="#1d2330" { "Parked " (title) }
            line x1=(PAD) y1=(H - PAD) x2=(W - PAD) y2=(H - PAD) stroke="#c9ced8" {}
            line x1=(PAD) y1=(TOP) x2=(PAD) y2=(H - PAD) stroke="#c9ced8" {}
            text x="4" y=(TOP + 4.0) fill="#667085" { (peak) }
            text x="4" y=(H - PAD + 4.0) fill="#667085" { "0" }
            text x=(PAD) y=(H - 12.0) fill="#667085" { (start.format("%m-%d %H:%M")) }
            text x=(W - PAD) y=(H - 12.0) fill="#667085" text-anchor="end" { (end.format("%m-%d %H:%M")) " UTC" }
            @for (k, (event_type, points)) in series.iter().enumerate() {
                polyline fill="none" stroke-width="2" stroke=(COLOURS[k % COLOURS.len()])
                    points=(points.iter().enumerate().map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v))).collect::<Vec<_>>().join(" ")) {}
                @let lx = PAD + 110.0 * f64::from(u32::try_from(k).unwrap_or(0));
                rect x=(lx) y="24" width="10" height="10" fill=(COLOURS[k % COLOURS.len()]) {}
                text x=(lx + 14.0) y="33" fill="#1d2330" { (label(event_type)) }
            }
            @if series.is_empty() { text x=(W / 2.0) y=(H / 2.0) text-anchor="middle" fill="#667085" { "Nothing parked." } }
        }
    }
}

/// The most characters of an event type in the legend, whose entries are 110 px apart.
const LABEL_CHARS: usize = 15;

/// An event type as the legend shows it, and as an SVG (XML 1.0) document may hold it: maud
/// escapes `<`, `>`, `&` and `"`; cut to [`LABEL_CHARS`] on one line with control and bidi
/// characters escaped ([`short`](crate::pages::short)), so that none is left (XML forbids
/// them even as character references: one in an event type would make the whole chart
/// unreadable), and the noncharacters XML forbids as well.
fn label(event_type: &str) -> String {
    let xml = event_type.replace('\u{FFFE}', "\\ufffe").replace('\u{FFFF}', "\\uffff");
    crate::pages::short(&xml, LABEL_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_escaping() {
        assert_eq!(buckets(None).unwrap().0, 24);
        assert_eq!(buckets(Some("7d")).unwrap().0, 28);
        assert!(buckets(Some("1y")).unwrap_err().message.contains("24h or 7d"));
        let svg = render("t", Utc::now(), TimeDelta::hours(1), &[("<script>".into(), vec![0, 3, 1])]).into_string();
        assert!(svg.contains("&lt;script&gt;") && !svg.contains("<script>"), "{svg}");
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn hostile_event_types_keep_the_svg_well_formed() {
        let hostile = [
            "ctl\u{1}\u{8}\u{1b}[31m",
            "nul\u{0}",
            "tab\tnew\nline\r",
            "del\u{7f}\u{85}",
            "non\u{FFFE}\u{FFFF}char",
            "<a>&amp;\"'",
        ];
        let series: Vec<(String, Vec<u64>)> = hostile.iter().map(|t| ((*t).to_owned(), vec![1, 2, 3])).collect();
        let svg = render("t", Utc::now(), TimeDelta::hours(1), &series).into_string();
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}: {svg:?}"));
        let legend: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
        for expected in [
            "ctl\\u0001\\u000…",
            "nul\\u0000",
            "tab new line ",
            "del\\u007f\\u0085",
            "non\\ufffe\\ufff…",
            "<a>&amp;\"'",
        ] {
            assert!(legend.contains(&expected), "{expected:?} in the legend: {legend:?}");
        }
        let long = render("t", Utc::now(), TimeDelta::hours(1), &[("x".repeat(10_000), vec![1])]).into_string();
        assert!(
            long.contains(&format!(">{}…<", "x".repeat(LABEL_CHARS - 1))),
            "a long event type is cut in the legend"
        );
    }
}
