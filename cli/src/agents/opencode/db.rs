//! OpenCode's database: reading a session's rows as lines, writing pulled
//! rows. Every write is one short `IMMEDIATE` transaction with a busy
//! timeout: OpenCode may be using the database (WAL mode) meanwhile.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction};

use super::row::{self, Line};

/// How long a write waits for OpenCode to let go of the database.
const BUSY: Duration = Duration::from_secs(5);

/// OpenCode's database, if it has made one (evi never creates it: its
/// schema is OpenCode's).
pub fn open(db: &Path) -> rusqlite::Result<Option<Connection>> {
    if !db.is_file() {
        return Ok(None);
    }
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY)?;
    Ok(Some(conn))
}

/// The columns of `table`, in order.
pub fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
    let cols = st.query_map([], |r| r.get::<_, String>(1))?;
    cols.collect()
}

/// The sessions in the database, by id.
pub fn session_ids(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("SELECT id FROM session ORDER BY time_created, id")?;
    let ids = st.query_map([], |r| r.get::<_, String>(0))?;
    ids.collect()
}

/// Whether a message row's `data` says it is finished: a user message, or
/// an assistant message completed or failed.
fn finished(data: &serde_json::Value) -> bool {
    data["role"] == "user" || !data["time"]["completed"].is_null() || !data["error"].is_null()
}

/// The lines of session `id`'s rows as they are now: its session row, its
/// finished messages in order (with `every`, those in flight too), each
/// followed by its parts.
pub fn session_lines(conn: &Connection, id: &str, every: bool) -> rusqlite::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let cols = columns(conn, "session")?;
    let mut st = conn.prepare("SELECT * FROM session WHERE id = ?1")?;
    let mut rows = st.query([id])?;
    while let Some(r) = rows.next()? {
        out.push(line_of(r, "session", None, &cols)?);
    }
    let cols = columns(conn, "message")?;
    let data_at = cols.iter().position(|c| c == "data");
    let mut st =
        conn.prepare("SELECT * FROM message WHERE session_id = ?1 ORDER BY time_created, id")?;
    let mut rows = st.query([id])?;
    let mut messages: Vec<(String, Option<String>, Vec<u8>)> = Vec::new();
    while let Some(r) = rows.next()? {
        let data: serde_json::Value = data_at
            .and_then(|i| r.get::<_, String>(i).ok())
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or_default();
        if !every && !finished(&data) {
            continue;
        }
        let mid: String = r.get("id")?;
        let role = data["role"].as_str().map(str::to_owned);
        messages.push((mid, role, line_of(r, "message", None, &cols)?));
    }
    let cols = columns(conn, "part")?;
    let mut st = conn.prepare("SELECT * FROM part WHERE message_id = ?1 ORDER BY id")?;
    for (mid, role, line) in messages {
        out.push(line);
        let mut rows = st.query([&mid])?;
        while let Some(r) = rows.next()? {
            out.push(line_of(r, "part", role.as_deref(), &cols)?);
        }
    }
    Ok(out)
}

fn line_of(
    r: &rusqlite::Row<'_>,
    table: &str,
    role: Option<&str>,
    cols: &[String],
) -> rusqlite::Result<Vec<u8>> {
    let vals: Vec<ValueRef<'_>> = (0..cols.len())
        .map(|i| r.get_ref(i))
        .collect::<rusqlite::Result<_>>()?;
    Ok(row::line(table, role, cols, &vals))
}

/// The row text ([`Line::row_text`]) of row `id` of `table` as the database
/// holds it now, `None` when it has no such row.
pub fn current(tx: &Transaction<'_>, table: &str, id: &str) -> rusqlite::Result<Option<String>> {
    let cols = columns(tx, table)?;
    let mut st = tx.prepare(&format!("SELECT * FROM \"{table}\" WHERE id = ?1"))?;
    let line = st
        .query_row([id], |r| line_of(r, table, None, &cols))
        .optional()?;
    Ok(line.and_then(|l| Line::parse(&l).map(|p| p.row_text.to_owned())))
}

/// Writes `line`'s row: inserted when `replace` is false, else the row of
/// its id updated to it. Columns the table does not have are left out; a row
/// that needs one the line lacks fails (and its transaction with it).
pub fn write(tx: &Transaction<'_>, line: &Line<'_>, replace: bool) -> rusqlite::Result<()> {
    let have = columns(tx, &line.table)?;
    let vals: Vec<(String, Value)> = line
        .values()
        .into_iter()
        .filter(|(c, _)| have.contains(c))
        .collect();
    if !replace {
        return insert(tx, &line.table, vals);
    }
    let sets: Vec<String> = vals
        .iter()
        .enumerate()
        .map(|(i, (c, _))| format!("\"{c}\" = ?{}", i + 1))
        .collect();
    let id = line.id().unwrap_or_default();
    let at = vals.len() + 1;
    let sql = format!(
        "UPDATE \"{}\" SET {} WHERE id = ?{at}",
        line.table,
        sets.join(", ")
    );
    let params = vals.into_iter().map(|(_, v)| v).chain([Value::Text(id)]);
    tx.execute(&sql, rusqlite::params_from_iter(params))?;
    Ok(())
}

/// Inserts a row of `vals` (column, value) into `table`.
fn insert<C: AsRef<str>>(
    tx: &Transaction<'_>,
    table: &str,
    vals: Vec<(C, Value)>,
) -> rusqlite::Result<()> {
    let sql = format!(
        "INSERT INTO \"{table}\" ({}) VALUES ({})",
        vals.iter()
            .map(|(c, _)| format!("\"{}\"", c.as_ref()))
            .collect::<Vec<_>>()
            .join(", "),
        (1..=vals.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    tx.execute(
        &sql,
        rusqlite::params_from_iter(vals.into_iter().map(|(_, v)| v)),
    )?;
    Ok(())
}

/// Makes sure the project a pulled session names is in the `project`
/// table, with this device's `directory` as its worktree: OpenCode finds a
/// session through its project (its id is the repository's, the same on
/// every clone with the same remote), and updates the row itself when it
/// starts there.
pub fn ensure_project(tx: &Transaction<'_>, session: &Line<'_>) -> rusqlite::Result<()> {
    let (Some(project), Some(dir)) = (session.text("project_id"), session.text("directory")) else {
        return Ok(());
    };
    let have = tx
        .query_row(
            "SELECT 1 FROM project WHERE id = ?1",
            [&project],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if have {
        return Ok(());
    }
    let now = chrono::Utc::now().timestamp_millis();
    let cols = columns(tx, "project")?;
    let mut vals: HashMap<&str, Value> = HashMap::new();
    vals.insert("id", Value::Text(project));
    vals.insert("worktree", Value::Text(dir));
    vals.insert("vcs", Value::Text("git".into()));
    vals.insert("time_created", Value::Integer(now));
    vals.insert("time_updated", Value::Integer(now));
    vals.insert("sandboxes", Value::Text("[]".into()));
    let vals: Vec<(&str, Value)> = cols
        .iter()
        .filter_map(|c| Some((c.as_str(), vals.remove(c.as_str())?)))
        .collect();
    insert(tx, "project", vals)
}

/// Deletes session `id`'s part, message and session rows (rows of other
/// tables that name it are left as they are); how many.
pub fn delete_session(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<usize> {
    let parts = tx.execute(
        "DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE session_id = ?1)",
        [id],
    )?;
    let messages = tx.execute("DELETE FROM message WHERE session_id = ?1", [id])?;
    let sessions = tx.execute("DELETE FROM session WHERE id = ?1", [id])?;
    Ok(parts + messages + sessions)
}
