//! Codex's own index of resumable sessions: the `threads` table of its
//! SQLite state database (`state_<n>.sqlite` in `$CODEX_SQLITE_HOME`, else
//! `$CODEX_HOME`). Current Codex CLIs look a session up there, not by
//! scanning `sessions/`, so a pulled rollout is entered there too.
//!
//! # Promises
//!
//! - Only a row for a thread the index does not have is added, in one
//!   transaction; an existing row is left to Codex. Nothing else is touched.
//! - The row is the one Codex's own import of the rollout writes (what it
//!   does for every rollout when it first creates its database): the
//!   `session_meta`'s fields (`source`, `originator`, `thread_source`,
//!   `history_mode`, git origin, ...), the last `turn_context`'s (the
//!   permission profile's JSON as `sandbox_policy`, `approval_mode`,
//!   `model`), the last token count, the first user message, the start time
//!   and the rollout's time of last change; a column the rollout says
//!   nothing of keeps the table's default. `history_mode` matters most:
//!   Codex resumes a thread marked `legacy` whose rollout is paginated (its
//!   lines carry `ordinal`) only to fail with "list_turns is not supported
//!   yet". `tests/tests/e2e/real_codex.rs` holds the row against Codex's
//!   own import, column by column.
//! - The columns are read from the database first (`PRAGMA table_info`).
//!   The row is written only when every column that needs a value (NOT NULL
//!   without a default) is one whose meaning is known here (the `threads`
//!   table of Codex's `0001_threads.sql` migration and the later columns
//!   named in [`KNOWN`]); any other schema is left alone and
//!   [`Outcome::UnknownSchema`] says which column, for the user to be told.
//! - No database: nothing is written ([`Outcome::NoDatabase`]); Codex
//!   imports every rollout itself when it creates one.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::files::{Facts, Meta};

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

/// Columns whose values are known (from the rollout, or Codex's defaults
/// for what it does not say: a read-only sandbox, approvals on request, a
/// CLI session), those `0001_threads.sql` requires first.
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
    "git_sha",
    "git_branch",
    "git_origin_url",
    "model",
    "reasoning_effort",
    "thread_source",
    "history_mode",
    "originator",
    "agent_nickname",
    "agent_role",
    "agent_path",
];

/// The columns `0001_threads.sql` creates that need a value: the first
/// ten of [`KNOWN`].
const REQUIRED: &[&str] = KNOWN.split_at(10).0;

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
    /// What its rollout says (see [`super::files::facts`]).
    pub facts: &'a Facts,
    pub rollout: &'a Path,
    /// The project as it is on this device.
    pub cwd: &'a str,
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
    let f = t.facts;
    let first = f.first_user_message.as_deref().unwrap_or("");
    let meta = |k: &str| f.meta.get(k).cloned();
    let value = |col: &str| -> Option<rusqlite::types::Value> {
        use rusqlite::types::Value::{Integer, Text};
        let text = |v: Option<String>| v.map(Text);
        match col {
            "id" => Some(Text(t.meta.id.clone())),
            "rollout_path" => Some(Text(t.rollout.display().to_string())),
            "created_at" => Some(Integer(created / 1000)),
            "updated_at" => Some(Integer(updated / 1000)),
            "created_at_ms" => Some(Integer(created)),
            "updated_at_ms" => Some(Integer(updated)),
            "source" => Some(Text(meta("source").unwrap_or_else(|| "cli".into()))),
            "model_provider" => Some(Text(
                meta("model_provider").unwrap_or_else(|| "openai".into()),
            )),
            "cwd" => Some(Text(t.cwd.into())),
            "title" | "first_user_message" | "preview" => Some(Text(first.into())),
            "sandbox_policy" => Some(Text(
                f.sandbox_policy
                    .clone()
                    .unwrap_or_else(|| "read-only".into()),
            )),
            "approval_mode" => Some(Text(
                f.approval_mode
                    .clone()
                    .unwrap_or_else(|| "on-request".into()),
            )),
            "tokens_used" => Some(Integer(f.tokens_used.unwrap_or(0))),
            "archived" => Some(Integer(0)),
            "has_user_event" => Some(Integer(i64::from(f.has_user_event))),
            "cli_version" => Some(Text(meta("cli_version").unwrap_or_default())),
            "git_sha" => text(f.git.get("commit_hash").cloned()),
            "git_branch" => text(f.git.get("branch").cloned()),
            "git_origin_url" => text(f.git.get("repository_url").cloned()),
            "model" => text(f.model.clone()),
            "reasoning_effort" => text(f.reasoning_effort.clone()),
            "memory_mode" | "thread_source" | "history_mode" | "originator" | "agent_nickname"
            | "agent_role" | "agent_path" => text(meta(col)),
            _ => None,
        }
    };
    // A column the rollout says nothing of keeps the table's default.
    let row: Vec<(&str, rusqlite::types::Value)> = cols
        .iter()
        .map(|(n, ..)| n.as_str())
        .filter(|n| KNOWN.contains(n))
        .filter_map(|n| Some((n, value(n)?)))
        .collect();
    let sql = format!(
        "INSERT INTO threads ({}) VALUES ({})",
        row.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        (1..=row.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let values: Vec<rusqlite::types::Value> = row.into_iter().map(|(_, v)| v).collect();
    tx.execute(&sql, rusqlite::params_from_iter(values))?;
    tx.commit()?;
    Ok(Outcome::Added(db))
}
