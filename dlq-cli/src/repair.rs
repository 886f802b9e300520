//! `dlq patch`: a JSON Patch from a file or standard input, or the payload in `$EDITOR`; a
//! group's patch is a stored operation (run by `bulk`).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitStatus;

use dlq_core::admin::{Admin, BulkPlan, PatchManyReport, PatchOutcome};
use dlq_core::{ListFilter, Payload, Status};

use crate::{Failure, exit};

/// What `dlq patch` did.
pub(crate) enum Repaired {
    /// One row, written.
    One(PatchOutcome),
    /// A preview (`--dry-run`): what the patch would change.
    Many(PatchManyReport),
    /// A group's patch (or a resumed one), to run as a stored operation.
    Stored(Option<BulkPlan>),
}

pub(crate) async fn patch(admin: &Admin, args: &crate::PatchArgs) -> Result<Repaired, Failure> {
    if args.resume.is_some() {
        return Ok(Repaired::Stored(None));
    }
    let reason = args.reason.as_deref().unwrap_or_default();
    let rows = match (&args.group, args.id) {
        (Some(group), _) => {
            let rows = ListFilter::default().fingerprint(group).status(Status::FailedPermanently);
            match args.where_version {
                Some(version) => of_version(admin, rows, version).await?,
                None => rows,
            }
        }
        (None, Some(id)) => ListFilter::default().ids([id]),
        (None, None) => return Err(Failure::usage("say which rows: an id, --group FP, or --resume N")),
    };
    let batch = args.batch.unwrap_or(100);
    match (&args.patch, args.id) {
        // One row's dry run: refused as the real patch would be, every value shown masked.
        (Some(source), Some(id)) if args.dry_run => {
            let one = admin.patch_dry_run(id, &json(source)?).await?;
            Ok(Repaired::Many(PatchManyReport { patched: vec![one], refused: Vec::new() }))
        }
        (Some(source), _) if args.dry_run => {
            Ok(Repaired::Many(admin.patch_preview(rows, &json(source)?, batch).await?))
        }
        (Some(source), Some(id)) => Ok(Repaired::One(admin.patch(id, &json(source)?, reason).await?)),
        (Some(source), None) => {
            let mut plan = BulkPlan::patch(rows, json(source)?, reason).batch(batch);
            plan.rate = args.rate;
            plan.validate = args.validate;
            Ok(Repaired::Stored(Some(plan)))
        }
        (None, Some(id)) => {
            let editor = editor()?;
            let current = admin.show(id).await?.letter.payload;
            let edited = edit(&current, &editor).await?;
            if edited == current {
                return Err(Failure::error("payload unchanged: nothing written"));
            }
            Ok(Repaired::One(admin.replace_payload(id, edited, reason).await?))
        }
        (None, None) => Err(Failure::usage("--group needs --patch FILE")),
    }
}

/// The rows of `rows` parked in payload `version`, by id (a stored operation keeps its
/// selection, and the version is not a store filter); none is a "nothing to do" failure.
async fn of_version(admin: &Admin, rows: ListFilter, version: u32) -> Result<ListFilter, Failure> {
    let mut ids = Vec::new();
    let mut page = rows.clone().oldest_first().limit(500);
    loop {
        let found = admin.list(page.clone()).await?;
        ids.extend(found.rows.iter().filter(|r| r.version == version).map(|r| r.id));
        match found.next {
            Some(last) => page = page.after(last),
            None => break,
        }
    }
    if ids.is_empty() {
        let group = rows.fingerprint.unwrap_or_default();
        return Err(Failure::nothing(format!("no FAILED_PERMANENTLY row of version {version} in group `{group}`")));
    }
    Ok(rows.ids(ids))
}

/// The patch document in `source`.
fn json(source: &Path) -> Result<serde_json::Value, Failure> {
    let text = read(source)?;
    serde_json::from_str(&text).map_err(|e| Failure::error(format!("patch {} is not JSON: {e}", source.display())))
}

fn read(source: &Path) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if source == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(source).map(|t| text = t)
    };
    read.map_err(|e| Failure::error(format!("cannot read patch {}: {e}", source.display())))?;
    Ok(text)
}

/// The editor `dlq patch ID` runs: `$VISUAL`, else `$EDITOR`, else `vi` when standard input
/// and output are a terminal (without one, vi would write its escapes into the output and
/// wait for keys that never come).
fn editor() -> Result<String, Failure> {
    let set = ["VISUAL", "EDITOR"].iter().find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()));
    if let Some(editor) = set {
        return Ok(editor);
    }
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return Ok("vi".to_owned());
    }
    Err(Failure::usage(
        "no editor to run: EDITOR and VISUAL are unset and there is no terminal for vi; pass --patch FILE (an RFC 6902 JSON Patch, - for standard input) or set EDITOR",
    ))
}

/// Writes the payload (pretty JSON, or its bytes) to a private temporary file (mode 0600, in
/// a directory of mode 0700, both removed on every way out: the edit's end, an error, SIGTERM
/// or SIGHUP), runs `editor` on it, and reads it back.
async fn edit(payload: &Payload, editor: &str) -> Result<Payload, Failure> {
    let text = match payload {
        Payload::Json(value) => serde_json::to_vec_pretty(value).unwrap_or_default(),
        Payload::Raw { bytes, .. } => bytes.clone(),
    };
    let cannot = |e: std::io::Error| Failure::error(format!("cannot write the file to edit: {e}"));
    // A private directory (0700) holds the file (0600) and whatever the editor writes beside
    // it (vi's swap file holds the payload too); all of it goes when the directory is dropped.
    let mut private = tempfile::Builder::new();
    #[cfg(unix)]
    private.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let dir = private.prefix("dlq-edit-").tempdir().map_err(cannot)?;
    let mut file = tempfile::Builder::new().prefix("payload-").suffix(".json").tempfile_in(&dir).map_err(cannot)?;
    file.write_all(&text).and_then(|()| file.flush()).map_err(cannot)?;
    let status = run_editor(editor, file.path()).await?;
    // Read by path: an editor may have replaced the file rather than written into it.
    let edited = std::fs::read(file.path());
    drop((file, dir));
    if !status.success() {
        if interrupted(status) {
            return Err(Failure {
                message: "interrupted: the editor stopped, nothing written".into(),
                code: exit::INTERRUPTED,
            });
        }
        return Err(Failure::error(format!("editor `{editor}` exited with {status}: nothing written")));
    }
    let edited = edited.map_err(|e| Failure::error(format!("cannot read the edited payload: {e}")))?;
    // Pretty-printing changed only the layout: the same JSON is the same payload.
    let edited_payload = Payload::from_bytes(&edited);
    if matches!(payload, Payload::Json(_)) && !matches!(edited_payload, Payload::Json(_)) {
        let err =
            serde_json::from_slice::<serde_json::Value>(&edited).err().map_or_else(String::new, |e| e.to_string());
        return Err(Failure::error(format!("the edited payload is not JSON ({err}): nothing written")));
    }
    Ok(edited_payload)
}

/// Runs `editor` on `path` and waits for it. Ctrl-C belongs to the editor while it runs (vi
/// and nano take it as a key; one that dies of it ends the edit, see [`interrupted`]), as
/// git does; SIGTERM and SIGHUP kill the editor and end the edit, so that its files are
/// removed before dlq exits (128 + the signal).
async fn run_editor(editor: &str, path: &Path) -> Result<ExitStatus, Failure> {
    let cannot = |e: std::io::Error| Failure::error(format!("cannot run editor `{editor}`: {e}"));
    #[cfg(unix)]
    let mut signals = Signals::watch().map_err(cannot)?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        // `exec`: the editor is dlq's child, so that a signal that ends the edit ends it too.
        .arg(format!("exec {editor} \"$1\""))
        .arg("dlq-editor")
        .arg(path)
        .kill_on_drop(true)
        .spawn()
        .map_err(cannot)?;
    #[cfg(unix)]
    {
        let ended = tokio::select! {
            status = child.wait() => Ok(status),
            Some(code) = signals.ending() => Err(code),
        };
        match ended {
            Ok(status) => {
                let status = status.map_err(cannot)?;
                // After a failed edit dlq only says so and exits: the Ctrl-C that ended the
                // editor must not end dlq before it has said it.
                if status.success() {
                    signals.after_edit();
                }
                Ok(status)
            }
            Err(code) => {
                // Gone before its directory is removed: nothing it writes outlives dlq.
                let _ = child.kill().await;
                Err(Failure { message: "stopped by a signal: nothing written".into(), code })
            }
        }
    }
    #[cfg(not(unix))]
    child.wait().await.map_err(cannot)
}

/// Whether the editor ended on Ctrl-C (killed by SIGINT, or a shell's 130 for it).
fn interrupted(status: ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(2) || status.code() == Some(i32::from(exit::INTERRUPTED))
    }
    #[cfg(not(unix))]
    {
        status.code() == Some(i32::from(exit::INTERRUPTED))
    }
}

/// The signals watched while the editor runs. Watching replaces their default action (ending
/// dlq at once, the file left behind) for the rest of the process.
#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn watch() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The exit code of the next signal (128 + its number); `None` once none can come.
    async fn next(&mut self) -> Option<u8> {
        tokio::select! {
            got = self.interrupt.recv() => got.map(|()| exit::INTERRUPTED),
            got = self.terminate.recv() => got.map(|()| 128 + 15),
            got = self.hangup.recv() => got.map(|()| 128 + 1),
        }
    }

    /// The exit code of the next signal that ends the edit: Ctrl-C does not, it is the
    /// editor's.
    async fn ending(&mut self) -> Option<u8> {
        loop {
            match self.next().await? {
                exit::INTERRUPTED => {}
                code => return Some(code),
            }
        }
    }

    /// After the edit, each of them ends dlq again (128 + its number), as before the editor
    /// ran; the file is gone by then.
    fn after_edit(mut self) {
        tokio::spawn(async move {
            if let Some(code) = self.next().await {
                std::process::exit(i32::from(code));
            }
        });
    }
}
