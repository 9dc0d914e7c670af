//! `evi sessions show --redactions ID`: where this device's pushes
//! replaced a secret in a session, from `sync/redactions.json`. It names the
//! file, line, entry and rule, never the secret.

use std::io::Write;

use serde::Serialize;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, resolve, scan, stdout};
use crate::sync::engine::redact::record::RedactionRecord;

/// One redacted line, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Where {
    /// `<day>/<session>.jsonl` under `transcripts/`.
    file: String,
    /// 1-based line number in that file (None if the file is gone).
    line: Option<u64>,
    offset: u64,
    entry: String,
    rules: std::collections::BTreeMap<String, u64>,
}

pub fn show_redactions(ctx: &Ctx, prefix: &str, json: bool) -> CommandResult {
    let catalog = scan(ctx)?;
    let (id, _) = resolve(&catalog, prefix)?;
    let record = RedactionRecord::load(&ctx.home.sync_dir()).map_err(|e| {
        user_error(format!("cannot read sync/redactions.json: {e}"))
            .hinted("move the file away: the next push that redacts starts a new one")
    })?;
    let mut found: Vec<Where> = record
        .streams
        .get(id.as_str())
        .into_iter()
        .flat_map(|s| s.values())
        .map(|r| Where {
            line: line_number(&ctx.home.transcripts_dir().join(&r.file), r.offset),
            file: r.file.clone(),
            offset: r.offset,
            entry: r.entry.clone(),
            rules: r.rules.clone(),
        })
        .collect();
    found.sort_by(|a, b| (&a.file, a.offset).cmp(&(&b.file, b.offset)));
    let mut out = stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &found).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    if found.is_empty() {
        writeln!(
            out,
            "session {id}: no line was redacted by this device's pushes"
        )?;
        return finish(out);
    }
    writeln!(
        out,
        "session {id}: {} lines synced with secrets replaced (the files here keep them)",
        found.len()
    )?;
    for w in &found {
        let rules: Vec<String> = w.rules.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
        let line = w.line.map_or_else(|| "?".to_owned(), |l| l.to_string());
        writeln!(
            out,
            "  {}:{line}  entry {}  {}",
            w.file,
            w.entry,
            rules.join(", ")
        )?;
    }
    finish(out)
}

/// The 1-based number of the line that starts at `offset` of `path`.
fn line_number(path: &std::path::Path, offset: u64) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let before = bytes.get(..offset as usize)?;
    Some(before.iter().filter(|&&b| b == b'\n').count() as u64 + 1)
}
