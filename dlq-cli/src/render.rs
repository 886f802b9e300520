//! Output: aligned tables for people (colour only on a terminal, `NO_COLOR` respected), one
//! JSON document per verb with `--json`.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use comfy_table::{Cell, Color, ContentArrangement, Table, presets};
use dlq_core::admin::{BulkReport, CanaryStop, Detail, Page, PatchManyReport, PatchOutcome, StatsReport, json};
use dlq_core::catalog::Verdict;
use dlq_core::{
    DeadLetter, Payload, Status, adapter::CircuitState, admin::RetrierHeartbeat, store::Circuit, store::Erasure,
};
use serde_json::{Value, json};

/// Where and how output goes. Every write is checked: a closed pipe (`dlq ls | head`) or a
/// full disk is recorded, later writes are skipped, and the verb ends with
/// [`Out::failed`] instead of a panic.
pub(crate) struct Out {
    pub(crate) json: bool,
    colour: bool,
    failed: Mutex<Option<std::io::Error>>,
}

/// Text read from the store, made harmless on a terminal: every control character (C0
/// but the newline where `newlines` keeps it, DEL, C1 U+0080 to U+009F) and every bidi
/// override or isolate (which reorder what is shown) becomes `.`; in one-line fields, a
/// newline, carriage return or tab becomes a space. So no stored row can clear the screen,
/// retitle the window, write the clipboard, plant a link or fake a line. Every table cell
/// and every human line goes through it; `--json` output is exact, every hazard written as its
/// `\u` escape ([`json::to_text`]).
pub(crate) fn neutralize(text: &str, newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| dlq_core::admin::is_hazard(c) || (!newlines && matches!(c, '\n' | '\r' | '\t'));
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            '\n' if newlines => '\n',
            '\t' if newlines => '\t',
            '\n' | '\r' | '\t' if !newlines => ' ',
            c if dlq_core::admin::is_hazard(c) => '.',
            c => c,
        })
        .collect()
}

/// A line for stderr (an error, a progress line): one line, neutralized, and the password of
/// any database URL in it masked (`postgres://user:***@host/db`).
pub(crate) fn stderr_line(text: &str) -> String {
    neutralize(&dlq_sqlx::mask_passwords(text), false).into_owned()
}

/// The most characters a table cell shows; longer text is cut, ending in `…` (`dlq show`
/// and `--json` have it whole).
pub(crate) const CELL_MAX: usize = 60;

/// The most characters of a line that quotes stored text (a warning, a refusal).
const LINE_MAX: usize = 160;

/// A table cell of stored text: one line, neutralized, at most [`CELL_MAX`] characters.
fn cell(text: impl Display) -> Cell {
    Cell::new(short(&text.to_string(), CELL_MAX))
}

/// A cell shown whole (one line, neutralized): the values of `dlq show`'s own row.
fn whole(text: impl Display) -> Cell {
    Cell::new(neutralize(&text.to_string(), false))
}

fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// At most `max` characters of `text` on one line, neutralized first (so a control character
/// counts as the one `.` it becomes) and cut between characters, never inside one.
pub(crate) fn short(text: &str, max: usize) -> String {
    let line = neutralize(text, false);
    if line.chars().count() <= max {
        return line.into_owned();
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
        Self { json, colour, failed: Mutex::new(None) }
    }

    /// The first write that failed, if any (a closed pipe is `BrokenPipe`).
    pub(crate) fn failed(&self) -> Option<std::io::ErrorKind> {
        self.failed.lock().ok().and_then(|f| f.as_ref().map(std::io::Error::kind))
    }

    /// The first failed write's error, as one line.
    pub(crate) fn failure_text(&self) -> String {
        self.failed.lock().ok().and_then(|f| f.as_ref().map(ToString::to_string)).unwrap_or_default()
    }

    /// Writes `text` and a newline to `stream` unless a write failed already; records a failure.
    fn write(&self, mut stream: impl Write, text: &str) {
        let Ok(mut failed) = self.failed.lock() else { return };
        if failed.is_some() {
            return;
        }
        if let Err(err) = writeln!(stream, "{text}").and_then(|()| stream.flush()) {
            *failed = Some(err);
        }
    }

    /// Lines on stdout, neutralized (newlines kept).
    fn line(&self, text: impl AsRef<str>) {
        self.write(std::io::stdout().lock(), &neutralize(text.as_ref(), true));
    }

    /// Output built here from neutralized parts (tables, colour codes): as it is.
    fn raw(&self, text: &str) {
        self.write(std::io::stdout().lock(), text);
    }

    /// A line on stderr, neutralized, whatever `--json` says (progress, errors).
    pub(crate) fn err_line(&self, text: &str) {
        self.write(std::io::stderr().lock(), &stderr_line(text));
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

    /// A table whose cells were all made with [`cell`] (or are numbers and times).
    fn print_table(&self, table: &Table) {
        self.raw(&table.trim_fmt());
    }

    /// JSON as it is: its escaping keeps controls out of the terminal.
    fn emit(&self, value: &Value) {
        self.raw(&json::to_text(value, true));
    }

    /// A warning line, in yellow on a terminal.
    fn warn(&self, text: &str) {
        let text = neutralize(text, false);
        if self.colour { self.raw(&format!("\x1b[33m! {text}\x1b[0m")) } else { self.raw(&format!("! {text}")) }
    }

    /// A line on stderr (not with `--json`).
    pub(crate) fn note(&self, text: &str) {
        if !self.json {
            self.err_line(text);
        }
    }

    pub(crate) fn stats(&self, report: &StatsReport) {
        if self.json {
            return self.emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let mut counts = self.table(&["EVENT TYPE", "PENDING", "PROCESSING", "SUCCEEDED", "FAILED", "DISCARDED"]);
        for c in &report.counts {
            let n = [c.pending, c.processing, c.succeeded, c.failed_permanently, c.discarded];
            let mut row = vec![cell(&c.event_type)];
            row.extend(n.iter().map(cell));
            counts.add_row(row);
        }
        self.print_table(&counts);
        let growth = &report.growth;
        self.line(format!(
            "\nparked in the last 5 min: {} (since {}), last hour: {} (since {})",
            growth.last_5m,
            growth.since_5m.format("%H:%M UTC"),
            growth.last_1h,
            growth.since_1h.format("%H:%M UTC")
        ));
        if let Some(s) = report.saturation {
            self.line(format!("saturation: {:.1}% of max_entries", s * 100.0));
        }
        if let Some(n) = report.sealed_unreadable.filter(|n| *n > 0) {
            self.line(format!("encrypted rows left claimed, their key missing: {n}"));
        }
        self.line("\nTOP FAILURE GROUPS");
        let mut groups =
            self.table(&["GROUP", "EVENT TYPE", "KIND", "COUNT", "FIRST SEEN", "LAST SEEN", "SAMPLE", "SAMPLE REASON"]);
        for g in &report.groups {
            groups.add_row(vec![
                cell(&g.fingerprint),
                cell(&g.event_type),
                cell(&g.kind),
                cell(g.count),
                cell(time(g.first_seen)),
                cell(time(g.last_seen)),
                cell(g.sample_id),
                cell(&g.sample_reason),
            ]);
        }
        self.print_table(&groups);
        if !report.circuits.is_empty() {
            self.line("\nCIRCUITS");
            self.circuit_table(&report.circuits, report.at);
        }
        self.line(format!("\nLIVE RETRIERS: {}", report.retriers.len()));
        self.retrier_table(&report.retriers);
        for orphan in &report.orphans {
            if let Some(handler) = &orphan.expected_handler {
                let event_type = short(&orphan.event_type, CELL_MAX);
                self.line(format!("orphaned `{event_type}`: expected handler {handler}"));
            }
        }
        for warning in &report.warnings {
            // A warning quotes stored text (an event type, a pause reason): one line, bounded.
            self.warn(&short(warning, LINE_MAX));
        }
    }

    fn retrier_table(&self, retriers: &[RetrierHeartbeat]) {
        if retriers.is_empty() {
            return;
        }
        let mut table = self.table(&["OWNER", "HOST", "PID", "EVENT TYPES", "SINGLETON", "STARTED", "LAST SEEN"]);
        for r in retriers {
            table.add_row(vec![
                cell(&r.owner),
                cell(&r.host),
                cell(r.pid),
                cell(r.event_types.join(",")),
                cell(r.singleton),
                cell(time(r.started_at)),
                cell(time(r.last_seen)),
            ]);
        }
        self.print_table(&table);
    }

    pub(crate) fn workers(&self, retriers: &[RetrierHeartbeat]) {
        if self.json {
            return self.emit(&json!({ "retriers": retriers }));
        }
        if retriers.is_empty() {
            self.line("no live retriers");
        }
        self.retrier_table(retriers);
    }

    pub(crate) fn list(&self, page: &Page) {
        if self.json {
            let rows: Vec<Value> = page.rows.iter().map(json::row).collect();
            return self.emit(&json!({ "rows": rows, "next": page.next }));
        }
        let mut table = self.table(&["ID", "STATUS", "EVENT TYPE", "KIND", "RETRIES", "REDRIVES", "PARKED", "REASON"]);
        for l in &page.rows {
            table.add_row(vec![
                cell(l.id),
                cell(l.status).fg(status_colour(l.status)),
                cell(&l.event_type),
                cell(&l.failure.kind),
                cell(format!("{}/{}", l.retry_count, l.max_retries)),
                cell(l.redrive_count),
                cell(time(l.created_at)),
                cell(&l.failure.reason),
            ]);
        }
        self.print_table(&table);
        match page.next {
            Some(next) => self.line(format!("\nmore: --after {next}")),
            None if page.rows.is_empty() => self.line("no rows match"),
            None => {}
        }
    }

    /// `dlq ls --undecodable`: the rows and why each would not decode.
    pub(crate) fn undecodable(&self, found: &dlq_core::admin::Undecodable) {
        if self.json {
            let rows: Vec<Value> = found
                .rows
                .iter()
                .map(|(row, why)| {
                    let mut row_json = json::row(row);
                    row_json["undecodable"] = json!(why);
                    row_json
                })
                .collect();
            return self.emit(&json!({ "rows": rows, "checked": found.checked, "next": found.next }));
        }
        let mut table = self.table(&["ID", "STATUS", "EVENT TYPE", "VERSION", "PARKED", "WHY IT WOULD NOT DECODE"]);
        for (l, why) in &found.rows {
            table.add_row(vec![
                cell(l.id),
                cell(l.status).fg(status_colour(l.status)),
                cell(&l.event_type),
                Cell::new(l.version),
                cell(time(l.created_at)),
                cell(why),
            ]);
        }
        if !found.rows.is_empty() {
            self.print_table(&table);
        }
        self.line(format!("{} rows checked, {} would not decode", found.checked, found.rows.len()));
        if let Some(next) = found.next {
            self.line(format!("more: --after {next}"));
        }
    }

    pub(crate) fn show(&self, detail: &Detail) {
        if self.json {
            return self.emit(&json::detail(detail));
        }
        let l = &detail.letter;
        let mut fields = self.table(&["FIELD", "VALUE"]);
        for (name, value) in summary(l) {
            fields.add_row(vec![cell(name), whole(value)]);
        }
        self.print_table(&fields);
        self.line("\nPAYLOAD");
        self.line(payload_text(&l.payload));
        self.line("\nERROR CHAIN");
        for (i, cause) in l.failure.chain.iter().enumerate() {
            self.line(format!("  {i}: {}", neutralize(cause, false)));
        }
        if let Some(trace) = &l.failure.stacktrace {
            self.line(format!("\nSTACK TRACE\n{}", dlq_core::sealed::shown_text(trace)));
        }
        self.line("\nATTEMPTS");
        let mut attempts = self.table(&["#", "OUTCOME", "CLASS", "OWNER", "AT", "REASON"]);
        for a in &detail.attempts {
            attempts.add_row(vec![
                cell(a.attempt),
                cell(&a.outcome),
                cell(a.error_class.as_deref().unwrap_or_default()),
                cell(a.owner.as_deref().unwrap_or_default()),
                cell(time(a.at)),
                cell(a.error_reason.as_deref().unwrap_or_default()),
            ]);
        }
        self.print_table(&attempts);
        self.line("\nAUDIT");
        if detail.audit.is_empty() {
            self.line("(no operator action)");
            return;
        }
        let mut audit = self.table(&["ENTRY", "ACTION", "ACTOR", "AT", "REASON", "DIFF"]);
        for a in &detail.audit {
            audit.add_row(vec![
                cell(a.id),
                cell(&a.action),
                cell(&a.actor),
                cell(time(a.at)),
                cell(a.reason.as_deref().unwrap_or_default()),
                cell(&a.diff),
            ]);
        }
        self.print_table(&audit);
    }

    pub(crate) fn bulk(&self, report: &BulkReport) {
        if self.json {
            return self.emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let verb = match (report.dry_run, report.action.as_str()) {
            (true, action) => format!("would {action}"),
            (false, "redrive") => "redriven".to_owned(),
            (false, "patch") => "patched".to_owned(),
            (false, _) => "discarded".to_owned(),
        };
        self.line(format!("{verb}: {} rows{}", report.moved_ids.len(), ids_text(&report.moved_ids)));
        for r in &report.refusals {
            self.line(format!("refused {}: {}", r.id, short(&r.why.to_string(), LINE_MAX)));
        }
        if let Some(op) = report.operation {
            self.line(format!(
                "operation {op}: {} ({} moved, {} refused in all; cursor {})",
                report.state.as_str(),
                report.moved,
                report.refused,
                report.cursor
            ));
        }
        match &report.canary_stop {
            Some(CanaryStop::Failed { failures }) => {
                self.warn("canary stopped: redriven rows failed again; the rest stay parked");
                for f in failures {
                    let same = if f.same_fingerprint { "same failure" } else { "new failure" };
                    self.line(format!(
                        "  {} {} ({same}, group {}): {}",
                        f.id,
                        f.status,
                        short(&f.fingerprint, CELL_MAX),
                        short(&f.reason, CELL_MAX)
                    ));
                }
            }
            Some(CanaryStop::NoOutcome { waiting }) => {
                let text =
                    format!("canary stopped: no outcome in time for{} (is a retrier running?)", ids_text(waiting));
                self.warn(&text);
            }
            None => {}
        }
    }

    pub(crate) fn patched(&self, outcome: &PatchOutcome) {
        if self.json {
            return self.emit(&json::patched(outcome));
        }
        self.line(format!(
            "patched {} (audit entry {}; `dlq undo {}` restores it)",
            outcome.id, outcome.audit_id, outcome.audit_id
        ));
        self.line(payload_text(&outcome.new));
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
                cell(&c.event_type),
                cell(c.state),
                cell(probe),
                cell(&paused),
                cell(c.reason.as_deref().unwrap_or("")),
            ]);
        }
        self.print_table(&table);
    }

    /// The circuit after `dlq pause` or `dlq resume`.
    pub(crate) fn circuit(&self, c: &Circuit) {
        if self.json {
            return self.emit(&serde_json::to_value(c).unwrap_or_default());
        }
        if c.paused {
            self.line(format!(
                "paused `{}`: no retrier claims it from its next poll (dlq resume {})",
                c.event_type, c.event_type
            ));
        } else {
            self.line(format!(
                "`{}` is not paused: retriers claim it from their next poll (circuit {})",
                c.event_type, c.state
            ));
        }
    }

    pub(crate) fn patched_many(&self, report: &PatchManyReport) {
        if self.json {
            return self.emit(&serde_json::to_value(report).unwrap_or_default());
        }
        self.line(format!("would patch: {} rows", report.patched.len()));
        let verdicts: Vec<_> = report.patched.iter().filter_map(|r| r.decodes.as_ref()).collect();
        if !verdicts.is_empty() {
            let decode = verdicts.iter().filter(|v| matches!(v, Verdict::AsIs | Verdict::AfterUpcast { .. })).count();
            let not = verdicts.iter().filter(|v| v.fails()).count();
            self.line(format!(
                "after the patch: {decode} of {} would decode, {not} would not, {} unchecked",
                verdicts.len(),
                verdicts.len() - decode - not
            ));
        }
        for row in &report.patched {
            self.line(format!("  {}", row.id));
            match &row.decodes {
                Some(Verdict::Not(why)) => self.line(format!("    would not decode: {}", short(why, LINE_MAX))),
                Some(Verdict::Unchecked(why)) => self.line(format!("    unchecked: {}", short(why, LINE_MAX))),
                _ => {}
            }
            for change in &row.changes {
                let value = |v: &Option<Value>| {
                    v.as_ref().map_or_else(|| "(absent)".to_owned(), |v| short(&v.to_string(), CELL_MAX))
                };
                self.line(format!("    {}: {} -> {}", change.path, value(&change.old), value(&change.new)));
            }
        }
        for r in &report.refused {
            self.line(format!("refused {}: {}", r.id, short(&r.reason, LINE_MAX)));
        }
    }

    pub(crate) fn rekeyed(&self, report: &dlq_core::admin::RekeyReport) {
        if self.json {
            return self.emit(&serde_json::to_value(report).unwrap_or_default());
        }
        let (moved, current) = (report.rekeyed.len(), report.current);
        self.line(format!("rekeyed {moved} rows; {current} already under the active key or not encrypted"));
        for (id, why) in &report.left {
            self.line(format!("left {id}: {}", short(why, LINE_MAX)));
        }
    }

    pub(crate) fn purged(&self, n: u64) {
        if self.json {
            return self.emit(&json!({ "purged": n }));
        }
        self.line(format!("purged {n} rows"));
    }

    /// `redrive --validate`'s counts per failure group, with each group's first error.
    pub(crate) fn validation(&self, report: &dlq_core::admin::ValidationReport) {
        if self.json {
            return self.emit(&json!({ "validation": report }));
        }
        let mut table =
            self.table(&["EVENT TYPE", "GROUP", "AS IS", "AFTER UPCAST", "UNCHECKED", "NOT", "FIRST ERROR"]);
        for g in &report.groups {
            let first = g.first_error.as_ref().or(g.first_unchecked.as_ref());
            table.add_row(vec![
                cell(&g.event_type),
                cell(&g.fingerprint),
                Cell::new(g.as_is),
                Cell::new(g.after_upcast),
                Cell::new(g.unchecked),
                Cell::new(g.not),
                cell(first.map(|(id, why)| format!("#{id}: {why}")).unwrap_or_default()),
            ]);
        }
        self.print_table(&table);
        self.line(format!(
            "{} rows checked: {} decode as they are, {} after upcasting, {} unchecked, {} not at all",
            report.checked,
            report.groups.iter().map(|g| g.as_is).sum::<u64>(),
            report.groups.iter().map(|g| g.after_upcast).sum::<u64>(),
            report.groups.iter().map(|g| g.unchecked).sum::<u64>(),
            report.failing(),
        ));
        for mismatch in &report.mismatches {
            self.warn(&mismatch.to_string());
        }
    }

    pub(crate) fn erased(&self, erased: &Erasure) {
        if self.json {
            return self.emit(&json!({ "erased": erased }));
        }
        self.line(format!(
            "erased {} rows of subject {}… with {} attempts and {} audit entries (erasure record {})",
            erased.rows, erased.subject_prefix, erased.attempts, erased.audit, erased.id
        ));
    }

    pub(crate) fn erasures(&self, erasures: &[Erasure]) {
        if self.json {
            return self.emit(&json!({ "erasures": erasures }));
        }
        let mut table = self.table(&["ID", "AT", "SUBJECT", "ROWS", "ATTEMPTS", "AUDIT", "ACTOR", "REASON"]);
        for e in erasures {
            table.add_row(vec![
                Cell::new(e.id),
                Cell::new(time(e.at)),
                cell(format!("{}…", e.subject_prefix)),
                Cell::new(e.rows),
                Cell::new(e.attempts),
                Cell::new(e.audit),
                cell(&e.actor),
                cell(&e.reason),
            ]);
        }
        self.print_table(&table);
    }

    pub(crate) fn upgraded(&self, event_type: &str, report: &dlq_core::admin::UpgradeReport) {
        if self.json {
            return self.emit(&json!({
                "event_type": event_type, "to": report.to, "dry_run": report.dry_run,
                "upgraded": report.upgraded.iter().map(|(id, from)| json!({ "id": id, "from": from })).collect::<Vec<_>>(),
                "refused": report.refused.iter().map(|(id, why)| json!({ "id": id, "reason": why })).collect::<Vec<_>>(),
            }));
        }
        let verb = if report.dry_run { "would upgrade" } else { "upgraded" };
        let n = report.upgraded.len();
        let ids: Vec<i64> = report.upgraded.iter().map(|(id, _)| *id).collect();
        self.line(format!("{verb} {n} rows of `{}` to version {}{}", event_type, report.to, ids_text(&ids)));
        for (id, why) in &report.refused {
            self.line(format!("refused {id}: {}", short(why, LINE_MAX)));
        }
    }

    /// `dlq roles`: the SQL (our own text over validated names), or what `--apply` set up.
    pub(crate) fn roles(&self, schema: &str, roles: &dlq_sqlx::postgres::Roles, sql: &str, applied: bool) {
        if self.json {
            return self.emit(&json!({
                "schema": schema,
                "applied": applied,
                "roles": {
                    "migrator": roles.migrator,
                    "service": roles.service,
                    "operator_read": roles.operator_read,
                    "operator": roles.operator,
                },
                "sql": sql,
            }));
        }
        if applied {
            self.line(format!(
                "roles set up on schema `{schema}`: {}, {}, {}, {} (grant them to login users: GRANT {} TO app;)",
                roles.migrator, roles.service, roles.operator_read, roles.operator, roles.service
            ));
        } else {
            self.raw(sql.trim_end());
        }
    }

    pub(crate) fn migrated(&self, schema: &str, migrated: &crate::connect::Migrated) {
        if self.json {
            return self.emit(&json!({
                "migrated": true,
                "schema": schema,
                "contracted": migrated.contracted,
                "contract_waiting": migrated.contract_waiting,
            }));
        }
        self.line("migrated: the dlq tables are up to date");
        for step in &migrated.contracted {
            self.line(format!("contracted: {step}"));
        }
        if !migrated.contract_waiting.is_empty() {
            self.line(format!(
                "waiting: {} (drops what processes of the previous release may use): run `dlq migrate --contract` \
                 once every process runs this release",
                migrated.contract_waiting.join(", ")
            ));
        }
    }
}

fn ids_text(ids: &[i64]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    format!(" ({})", id_list(ids))
}

/// Ids as `1, 2, 3`: the first 20, then how many more.
pub(crate) fn id_list(ids: &[i64]) -> String {
    const SHOWN: usize = 20;
    let mut text: Vec<String> = ids.iter().take(SHOWN).map(ToString::to_string).collect();
    if ids.len() > SHOWN {
        text.push(format!("… {} more", ids.len() - SHOWN));
    }
    text.join(", ")
}

fn summary(l: &DeadLetter) -> Vec<(String, String)> {
    let mut rows = vec![
        ("id", l.id.to_string()),
        ("status", l.status.to_string()),
        ("dead reason", l.dead_reason.map(|r| r.to_string()).unwrap_or_default()),
        ("event type", l.event_type.clone()),
        ("version", l.version.to_string()),
        ("handler", l.handler.clone()),
        ("error", format!("{} {}: {}", l.failure.class.as_str(), l.failure.kind, l.failure.reason)),
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

/// The payload for people: pretty JSON, or hex and lossy text of raw bytes (neutralized
/// when printed, as every line is: JSON leaves DEL, C1 and bidi characters unescaped).
fn payload_text(payload: &Payload) -> String {
    if let Some(key) = dlq_core::sealed::sealed_key(payload) {
        let clear =
            dlq_core::sealed::clear_fields(payload).map(|c| serde_json::to_string_pretty(c).unwrap_or_default());
        let placeholder = dlq_core::sealed::placeholder(key);
        return clear.map_or_else(|| placeholder.clone(), |c| format!("{placeholder}\nin clear: {c}"));
    }
    match payload {
        Payload::Json(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
        Payload::Raw { bytes, truncated } => {
            let text = String::from_utf8_lossy(bytes);
            // Why it is raw (the summary's "truncated" line says it for a cut payload).
            let note = payload.raw_note().filter(|_| truncated.is_none()).map(|n| format!("note: {n}\n"));
            let hex = dlq_core::admin::hex(bytes);
            format!("raw bytes ({}):\n{}hex:  {hex}\ntext: {text}", bytes.len(), note.unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutralize_turns_every_terminal_control_into_a_dot() {
        let hostile = "a\x1b[2Jb\x1b]0;title\x07c\u{9b}31m\u{202e}d\u{2066}e\x7f\x00";
        assert_eq!(neutralize(hostile, false), "a.[2Jb.]0;title.c.31m.d.e..");
        assert_eq!(neutralize("one\ntwo\r\tthree", false), "one two  three");
        assert_eq!(neutralize("one\ntwo\r\tthree", true), "one\ntwo.\tthree");
        assert!(matches!(neutralize("plain ünïcode → fine", false), Cow::Borrowed(_)));
    }

    #[test]
    fn short_cuts_by_characters_after_neutralizing() {
        assert_eq!(short("ééééé", 5), "ééééé", "five characters fit, whatever their bytes");
        assert_eq!(short("éééééé", 5), "éééé…");
        assert_eq!(short("💳💳💳💳", 3), "💳💳…", "never inside a character");
        // Each control becomes one `.` before counting; no escape is cut in half to leak.
        assert_eq!(short("\x1b[31mred\x1b[0m", 8), ".[31mre…");
        assert_eq!(short("a\nb", 8), "a b");
        let long = "x".repeat(10_000);
        assert_eq!(short(&long, CELL_MAX).chars().count(), CELL_MAX);
    }
}
