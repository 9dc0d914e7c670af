//! Codex's own index of resumable sessions: the `threads` table of its
//! SQLite state database (`state_<n>.sqlite` in `$CODEX_SQLITE_HOME`, else
//! `$CODEX_HOME`). Current Codex CLIs look a session up there, not by
//! scanning `sessions/`, so a pulled rollout is entered there too.
//!
//! # Promises
//!
//! - Only a row for a thread the index does not have is added, in one
//!   transaction; an existing row is left to Codex. Nothing else is touched.
//! - The columns are read from the database first (`PRAGMA table_info`).
//!   The row is written only when every column that needs a value (NOT NULL
//!   without a default) is one whose meaning is known here (the `threads`
//!   table of Codex's `0001_threads.sql` migration and the later columns
//!   named in [`KNOWN`]); any other schema is left alone and
//!   [`Outcome::UnknownSchema`] says which column, for the user to be told.
//! - No database: nothing is written ([`Outcome::NoDatabase`]).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::codex::Meta;

/// What entering a session in the index came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Added(PathBuf),
    Present,
    NoDatabase,
    /// The table needs a value for a column not known here (or lacks one
    /// that is): left alone.
    UnknownSchema {
        db: PathBuf,
        why: String,
    },
}

/// Columns whose values are known, and the Codex defaults for what a
/// rollout's `session_meta` does not say (`ThreadMetadataBuilder::new`:
/// a read-only sandbox, approvals on request, a CLI session).
const KNOWN: &[&str] = &[
    "id",
    "rollout_path",
    "created_at",
    "updated_at",
    "source",
    "model_provider",
    "cwd",
    "title",
    "sandbox_policy",
    "approval_mode",
    "tokens_used",
    "archived",
    "has_user_event",
    "cli_version",
    "first_user_message",
    "created_at_ms",
    "updated_at_ms",
    "memory_mode",
    "preview",
];

/// The columns `0001_threads.sql` creates that need a value.
const REQUIRED: &[&str] = &[
    "id",
    "rollout_path",
    "created_at",
    "updated_at",
    "source",
    "model_provider",
    "cwd",
    "title",
    "sandbox_policy",
    "approval_mode",
];

/// The state database under `dir` with the highest version number.
pub fn database(codex_root: &Path) -> Option<PathBuf> {
    let dir = std::env::var_os("CODEX_SQLITE_HOME")
        .filter(|v| !v.is_empty())
        .map_or_else(|| codex_root.to_owned(), PathBuf::from);
    std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name
                .strip_prefix("state_")?
                .strip_suffix(".sqlite")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// A session as the index needs it.
pub struct Thread<'a> {
    pub meta: &'a Meta,
    pub rollout: &'a Path,
    /// The project as it is on this device.
    pub cwd: &'a str,
    pub model_provider: Option<&'a str>,
    pub cli_version: Option<&'a str>,
    pub first_user_message: Option<&'a str>,
}

/// Enters `t` in the index of the Codex folder `root`.
pub fn enter(root: &Path, t: &Thread<'_>) -> rusqlite::Result<Outcome> {
    let Some(db) = database(root) else {
        return Ok(Outcome::NoDatabase);
    };
    let mut conn = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut cols = Vec::new();
    {
        let mut st = tx.prepare("PRAGMA table_info(threads)")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(1)?,
                r.get::<_, i64>(3)? != 0,
                r.get::<_, Option<String>>(4)?.is_some(),
            ))
        })?;
        for r in rows {
            cols.push(r?);
        }
    }
    let unknown = |why: String| Outcome::UnknownSchema {
        db: db.clone(),
        why,
    };
    if let Some(missing) = REQUIRED
        .iter()
        .find(|c| !cols.iter().any(|(n, ..)| n == *c))
    {
        return Ok(unknown(format!(
            "its threads table has no `{missing}` column"
        )));
    }
    if let Some((col, ..)) = cols
        .iter()
        .find(|(n, notnull, default)| *notnull && !*default && !KNOWN.contains(&n.as_str()))
    {
        return Ok(unknown(format!(
            "its threads table needs a `{col}`, which this version does not know"
        )));
    }
    let present = tx
        .query_row(
            "SELECT 1 FROM threads WHERE id = ?1",
            [t.meta.id.as_str()],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if present {
        tx.commit()?;
        return Ok(Outcome::Present);
    }
    let created = chrono::DateTime::parse_from_rfc3339(&t.meta.timestamp)
        .map(|d| d.timestamp_millis())
        .unwrap_or(0);
    let updated = std::fs::metadata(t.rollout)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(created, |d| d.as_millis() as i64);
    let first = t.first_user_message.unwrap_or("");
    let value = |col: &str| -> rusqlite::types::Value {
        use rusqlite::types::Value::{Integer, Text};
        match col {
            "id" => Text(t.meta.id.clone()),
            "rollout_path" => Text(t.rollout.display().to_string()),
            "created_at" => Integer(created / 1000),
            "updated_at" => Integer(updated / 1000),
            "created_at_ms" => Integer(created),
            "updated_at_ms" => Integer(updated),
            "source" => Text("cli".into()),
            "model_provider" => Text(t.model_provider.unwrap_or("openai").into()),
            "cwd" => Text(t.cwd.into()),
            "title" | "first_user_message" | "preview" => Text(first.into()),
            "sandbox_policy" => Text("read-only".into()),
            "approval_mode" => Text("on-request".into()),
            "tokens_used" | "archived" => Integer(0),
            "has_user_event" => Integer(i64::from(!first.is_empty())),
            "cli_version" => Text(t.cli_version.unwrap_or("").into()),
            "memory_mode" => Text("enabled".into()),
            _ => rusqlite::types::Value::Null,
        }
    };
    let names: Vec<&str> = cols
        .iter()
        .map(|(n, ..)| n.as_str())
        .filter(|n| KNOWN.contains(n))
        .collect();
    let sql = format!(
        "INSERT INTO threads ({}) VALUES ({})",
        names.join(", "),
        (1..=names.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let values: Vec<rusqlite::types::Value> = names.iter().map(|n| value(n)).collect();
    tx.execute(&sql, rusqlite::params_from_iter(values))?;
    tx.commit()?;
    Ok(Outcome::Added(db))
}
