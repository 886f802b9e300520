//! Output: aligned tables for people (colour only on a terminal, `NO_COLOR` respected), one
//! JSON document per verb with `--json`.

use std::io::IsTerminal;

use chrono::{DateTime, Utc};
use comfy_table::{Cell, Color, ContentArrangement, Table, presets};
use dlq_core::admin::{BulkReport, CanaryStop, Detail, Page, PatchManyReport, PatchOutcome, StatsReport, json};
use dlq_core::{Circuit, CircuitState, DeadLetter, Payload, RetrierHeartbeat, Status};
use serde_json::{Value, json};

/// Where and how output goes.
pub(crate) struct Out {
    pub(crate) json: bool,
    colour: bool,
}

fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// At most `max` characters of `text` on one line.
fn short(text: &str, max: usize) -> String {
    let line = text.replace(['\n', '\r'], " ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn status_colour(status: Status) -> Color {
    match status {
        Status::FailedPermanently => Color::Red,
        Status::Pending | Status::Processing => Color::Yellow,
        Status::Succeeded => Color::Green,
        Status::Discarded => Color::DarkGrey,
    }
}

impl Out {
    pub(crate) fn new(json: bool) -> Self {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Self { json, colour }
    }

    fn table(&self, header: &[&str]) -> Table {
        let mut table = Table::new();
        table.load_preset(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled);
        if !self.colour {
            table.force_no_tty();
        }
        table.set_header(header.iter().map(|h| Cell::new(h).add_attribute(comfy_table::Attribute::Bold)));
        table
    }

    fn print_table(table: &Table) {
        println!("{}", table.trim_fmt());
    }

    fn emit(value: &Value) {
        println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
    }

    fn warn(&self, text: &str) -> String {
        if self.colour { format!("\x1b[33m! {text}\x1b[0m") } else { format!("! {text}") }
    }

    /// A line on stderr (not with `--json`).
    pub(crate) fn note(&self, text: &str) {
        if !self.json {
            eprintln!("{text}");
        }
    }

    pub(crate) fn stats(&self, report: &StatsReport) {
        if self.json {
            return Self::emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let mut counts = self.table(&["EVENT TYPE", "PENDING", "PROCESSING", "SUCCEEDED", "FAILED", "DISCARDED"]);
        for c in &report.counts {
            let n = [c.pending, c.processing, c.succeeded, c.failed_permanently, c.discarded];
            let mut row = vec![Cell::new(&c.event_type)];
            row.extend(n.iter().map(Cell::new));
            counts.add_row(row);
        }
        Self::print_table(&counts);
        println!("\nparked in the last 5 min: {}, last hour: {}", report.growth.last_5m, report.growth.last_1h);
        if let Some(s) = report.saturation {
            println!("saturation: {:.1}% of max_entries", s * 100.0);
        }
        println!("\nTOP FAILURE GROUPS");
        let mut groups =
            self.table(&["GROUP", "EVENT TYPE", "KIND", "COUNT", "FIRST SEEN", "LAST SEEN", "SAMPLE", "SAMPLE REASON"]);
        for g in &report.groups {
            groups.add_row(vec![
                Cell::new(&g.fingerprint),
                Cell::new(&g.event_type),
                Cell::new(&g.kind),
                Cell::new(g.count),
                Cell::new(time(g.first_seen)),
                Cell::new(time(g.last_seen)),
                Cell::new(g.sample_id),
                Cell::new(short(&g.sample_reason, 60)),
            ]);
        }
        Self::print_table(&groups);
        if !report.circuits.is_empty() {
            println!("\nCIRCUITS");
            self.circuit_table(&report.circuits, report.at);
        }
        println!("\nLIVE RETRIERS: {}", report.retriers.len());
        self.retrier_table(&report.retriers);
        for orphan in &report.orphans {
            if let Some(handler) = &orphan.expected_handler {
                println!("orphaned `{}`: expected handler {handler}", orphan.event_type);
            }
        }
        for warning in &report.warnings {
            println!("{}", self.warn(warning));
        }
    }

    fn retrier_table(&self, retriers: &[RetrierHeartbeat]) {
        if retriers.is_empty() {
            return;
        }
        let mut table = self.table(&["OWNER", "HOST", "PID", "EVENT TYPES", "SINGLETON", "STARTED", "LAST SEEN"]);
        for r in retriers {
            table.add_row(vec![
                Cell::new(&r.owner),
                Cell::new(&r.host),
                Cell::new(r.pid),
                Cell::new(r.event_types.join(",")),
                Cell::new(r.singleton),
                Cell::new(time(r.started_at)),
                Cell::new(time(r.last_seen)),
            ]);
        }
        Self::print_table(&table);
    }

    pub(crate) fn workers(&self, retriers: &[RetrierHeartbeat]) {
        if self.json {
            return Self::emit(&json!({ "retriers": retriers }));
        }
        if retriers.is_empty() {
            println!("no live retriers");
        }
        self.retrier_table(retriers);
    }

    pub(crate) fn list(&self, page: &Page) {
        if self.json {
            let rows: Vec<Value> = page.rows.iter().map(json::row).collect();
            return Self::emit(&json!({ "rows": rows, "next": page.next }));
        }
        let mut table = self.table(&["ID", "STATUS", "EVENT TYPE", "KIND", "RETRIES", "REDRIVES", "PARKED", "REASON"]);
        for l in &page.rows {
            table.add_row(vec![
                Cell::new(l.id),
                Cell::new(l.status).fg(status_colour(l.status)),
                Cell::new(&l.event_type),
                Cell::new(&l.failure.kind),
                Cell::new(format!("{}/{}", l.retry_count, l.max_retries)),
                Cell::new(l.redrive_count),
                Cell::new(time(l.created_at)),
                Cell::new(short(&l.failure.reason, 60)),
            ]);
        }
        Self::print_table(&table);
        match page.next {
            Some(next) => println!("\nmore: --after {next}"),
            None if page.rows.is_empty() => println!("no rows match"),
            None => {}
        }
    }

    pub(crate) fn show(&self, detail: &Detail) {
        if self.json {
            return Self::emit(&json::detail(detail));
        }
        let l = &detail.letter;
        let mut fields = self.table(&["FIELD", "VALUE"]);
        for (name, value) in summary(l) {
            fields.add_row(vec![name, value]);
        }
        Self::print_table(&fields);
        println!("\nPAYLOAD");
        println!("{}", payload_text(&l.payload));
        println!("\nERROR CHAIN");
        for (i, cause) in l.failure.chain.iter().enumerate() {
            println!("  {i}: {cause}");
        }
        if let Some(trace) = &l.failure.stacktrace {
            println!("\nSTACK TRACE\n{trace}");
        }
        println!("\nATTEMPTS");
        let mut attempts = self.table(&["#", "OUTCOME", "CLASS", "OWNER", "AT", "REASON"]);
        for a in &detail.attempts {
            attempts.add_row(vec![
                a.attempt.to_string(),
                a.outcome.clone(),
                a.error_class.clone().unwrap_or_default(),
                a.owner.clone().unwrap_or_default(),
                time(a.at),
                short(a.error_reason.as_deref().unwrap_or_default(), 60),
            ]);
        }
        Self::print_table(&attempts);
        println!("\nAUDIT");
        if detail.audit.is_empty() {
            println!("(no operator action)");
            return;
        }
        let mut audit = self.table(&["ENTRY", "ACTION", "ACTOR", "AT", "REASON", "DIFF"]);
        for a in &detail.audit {
            audit.add_row(vec![
                a.id.to_string(),
                a.action.clone(),
                a.actor.clone(),
                time(a.at),
                a.reason.clone().unwrap_or_default(),
                short(&a.diff.to_string(), 80),
            ]);
        }
        Self::print_table(&audit);
    }

    pub(crate) fn bulk(&self, report: &BulkReport) {
        if self.json {
            return Self::emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let verb = match (report.dry_run, report.action.as_str()) {
            (true, action) => format!("would {action}"),
            (false, "redrive") => "redriven".to_owned(),
            (false, _) => "discarded".to_owned(),
        };
        println!("{verb}: {} rows{}", report.moved_ids.len(), ids_text(&report.moved_ids));
        for r in &report.refusals {
            println!("refused {}: {}", r.id, r.why);
        }
        if let Some(op) = report.operation {
            println!(
                "operation {op}: {} ({} moved, {} refused in all; cursor {})",
                report.state.as_str(),
                report.moved,
                report.refused,
                report.cursor
            );
        }
        match &report.canary_stop {
            Some(CanaryStop::Failed { failures }) => {
                println!("{}", self.warn("canary stopped: redriven rows failed again; the rest stay parked"));
                for f in failures {
                    let same = if f.same_fingerprint { "same failure" } else { "new failure" };
                    println!("  {} {} ({same}, group {}): {}", f.id, f.status, f.fingerprint, short(&f.reason, 80));
                }
            }
            Some(CanaryStop::NoOutcome { waiting }) => {
                let text =
                    format!("canary stopped: no outcome in time for{} (is a retrier running?)", ids_text(waiting));
                println!("{}", self.warn(&text));
            }
            None => {}
        }
    }

    pub(crate) fn patched(&self, outcome: &PatchOutcome) {
        if self.json {
            return Self::emit(&json::patched(outcome));
        }
        println!(
            "patched {} (audit entry {}; `dlq undo {}` restores it)",
            outcome.id, outcome.audit_id, outcome.audit_id
        );
        println!("{}", payload_text(&outcome.new));
    }

    fn circuit_table(&self, circuits: &[Circuit], at: DateTime<Utc>) {
        let mut table = self.table(&["EVENT TYPE", "STATE", "NEXT PROBE", "PAUSED", "REASON"]);
        for c in circuits {
            let probe = c
                .open_until
                .filter(|_| c.state == CircuitState::Open)
                .map_or_else(String::new, |u| format!("in {}s", (u - at).num_seconds().max(0)));
            let paused = match (&c.paused_by, &c.pause_reason) {
                _ if !c.paused => String::new(),
                (by, why) => format!("by {}: {}", by.as_deref().unwrap_or("?"), why.as_deref().unwrap_or("")),
            };
            table.add_row(vec![
                Cell::new(&c.event_type),
                Cell::new(c.state),
                Cell::new(probe),
                Cell::new(short(&paused, 60)),
                Cell::new(short(c.reason.as_deref().unwrap_or(""), 60)),
            ]);
        }
        Self::print_table(&table);
    }

    /// The circuit after `dlq pause` or `dlq resume`.
    pub(crate) fn circuit(&self, c: &Circuit) {
        if self.json {
            return Self::emit(&serde_json::to_value(c).unwrap_or_default());
        }
        if c.paused {
            println!(
                "paused `{}`: no retrier claims it from its next poll (dlq resume {})",
                c.event_type, c.event_type
            );
        } else {
            println!("`{}` is not paused: retriers claim it from their next poll (circuit {})", c.event_type, c.state);
        }
    }

    pub(crate) fn patched_many(&self, report: &PatchManyReport) {
        if self.json {
            return Self::emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let verb = if report.dry_run { "would patch" } else { "patched" };
        println!("{verb}: {} rows", report.patched.len());
        for row in &report.patched {
            let audit = row.audit_id.map(|a| format!(" (audit entry {a})")).unwrap_or_default();
            println!("  {}{audit}", row.id);
            for change in &row.changes {
                let value =
                    |v: &Option<Value>| v.as_ref().map_or_else(|| "(absent)".to_owned(), |v| short(&v.to_string(), 60));
                println!("    {}: {} -> {}", change.path, value(&change.old), value(&change.new));
            }
        }
        for r in &report.refused {
            println!("refused {}: {}", r.id, short(&r.reason, 160));
        }
        if !report.dry_run && !report.patched.is_empty() {
            println!("`dlq undo AUDIT_ID` restores a row's payload");
        }
    }

    pub(crate) fn purged(&self, n: u64) {
        if self.json {
            return Self::emit(&json!({ "purged": n }));
        }
        println!("purged {n} rows");
    }

    pub(crate) fn migrated(&self, schema: &str) {
        if self.json {
            return Self::emit(&json!({ "migrated": true, "schema": schema }));
        }
        println!("migrated: the dlq tables are up to date");
    }
}

fn ids_text(ids: &[i64]) -> String {
    const SHOWN: usize = 20;
    if ids.is_empty() {
        return String::new();
    }
    let mut text: Vec<String> = ids.iter().take(SHOWN).map(ToString::to_string).collect();
    if ids.len() > SHOWN {
        text.push(format!("… {} more", ids.len() - SHOWN));
    }
    format!(" ({})", text.join(", "))
}

fn summary(l: &DeadLetter) -> Vec<(String, String)> {
    let mut rows = vec![
        ("id", l.id.to_string()),
        ("status", l.status.to_string()),
        ("dead reason", l.dead_reason.map(|r| r.to_string()).unwrap_or_default()),
        ("event type", l.event_type.clone()),
        ("handler", l.handler.clone()),
        ("error", format!("{} {}: {}", l.failure.class.name(), l.failure.kind, l.failure.reason)),
        ("group", l.failure.fingerprint.clone()),
        ("retries", format!("{} of {}", l.retry_count, l.max_retries)),
        ("redrives", l.redrive_count.to_string()),
        ("parked", time(l.created_at)),
        ("updated", time(l.updated_at)),
        ("retry after", time(l.retry_after)),
        ("dedupe key", l.dedupe_key.clone().unwrap_or_default()),
        ("source", source_text(l)),
        ("trace context", l.source.trace_context.clone().unwrap_or_default()),
    ];
    if let Payload::Raw { truncated: Some(t), bytes } = &l.payload {
        rows.push((
            "truncated",
            format!("{} of {} bytes kept, sha256 {}", bytes.len(), t.original_len, t.original_sha256),
        ));
    }
    rows.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn source_text(l: &DeadLetter) -> String {
    let s = &l.source;
    let place = match (&s.topic, s.partition, s.offset) {
        (Some(t), Some(p), Some(o)) => format!("{t}/{p}/{o}"),
        (Some(t), _, _) => t.clone(),
        _ => String::new(),
    };
    let headers: Vec<String> = s.headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if headers.is_empty() { place } else { format!("{place} [{}]", headers.join(", ")) }
}

/// The payload for people: pretty JSON, or hex and lossy text of raw bytes.
fn payload_text(payload: &Payload) -> String {
    match payload {
        Payload::Json(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
        Payload::Raw { bytes, .. } => {
            let text: String = String::from_utf8_lossy(bytes)
                .chars()
                .map(|c| if c.is_control() && c != '\n' { '.' } else { c })
                .collect();
            format!("raw bytes ({}):\nhex:  {}\ntext: {text}", bytes.len(), dlq_core::admin::hex(bytes))
        }
    }
}
