//! `dlq patch`: a JSON Patch from a file or standard input, or the payload in `$EDITOR`; a
//! group's patch is a stored operation (run by `bulk`).

use std::io::Read;
use std::path::Path;

use dlq_core::admin::{Admin, BulkPlan, PatchManyReport, PatchOutcome};
use dlq_core::{ListFilter, Payload, Status};

use crate::Failure;

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
            let current = admin.show(id).await?.letter.payload;
            let edited = edit(&current)?;
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

/// Writes the payload (pretty JSON, or its bytes) to a temporary file, runs `$VISUAL` or
/// `$EDITOR` (default `vi`) on it, and reads it back.
fn edit(payload: &Payload) -> Result<Payload, Failure> {
    let text = match payload {
        Payload::Json(value) => serde_json::to_vec_pretty(value).unwrap_or_default(),
        Payload::Raw { bytes, .. } => bytes.clone(),
    };
    let file = std::env::temp_dir().join(format!("dlq-edit-{}.json", std::process::id()));
    std::fs::write(&file, &text).map_err(|e| Failure::error(format!("cannot write {}: {e}", file.display())))?;
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("dlq-editor")
        .arg(&file)
        .status();
    let edited = std::fs::read(&file);
    let _ = std::fs::remove_file(&file);
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(Failure::error(format!("editor `{editor}` exited with {s}: nothing written"))),
        Err(e) => return Err(Failure::error(format!("cannot run editor `{editor}`: {e}"))),
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
