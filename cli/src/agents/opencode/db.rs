//! OpenCode's database: reading a session's rows as lines, writing pulled
//! rows. Every write is in short `IMMEDIATE` transactions ([`Batch`]) with a
//! busy timeout: OpenCode may be using the database (WAL mode) meanwhile.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use sha2::{Digest, Sha256};

use super::row::{self, Line};

/// How long a write waits for OpenCode to let go of the database.
const BUSY: Duration = Duration::from_secs(5);

/// How long evi holds OpenCode's database for writing at most, about: a
/// long import (a fresh pull of many sessions) commits and begins again
/// after it, so that an OpenCode writing meanwhile waits no longer than
/// this for its turn, whatever the import's size.
const HOLD: Duration = Duration::from_millis(200);

/// A write to OpenCode's database as a run of `IMMEDIATE` transactions of
/// at most about [`HOLD`] each ([`Self::breathe`] between rows). Each row is
/// written whole or not at all; a crash between two of them leaves the rows
/// before in, which the next import finds there (see [`super::mirror`]'s
/// record of who wrote a row). Rolled back when dropped uncommitted.
///
/// The transactions commit without a flush each (`synchronous = NORMAL` on
/// evi's connection alone: in WAL mode a commit is then a write to the WAL,
/// and the flushes only come with checkpoints); [`Self::commit`] flushes the
/// WAL and the database once, at the end, before anything is recorded of
/// what went in. A flush per 200 ms transaction was most of a fresh pull's
/// wait. A crash before that flush may lose the last transactions, which is
/// what a crash before any commit does: the rows are still in the mirror.
pub struct Batch<'c> {
    conn: &'c Connection,
    since: std::time::Instant,
    open: bool,
    /// `synchronous` as it was, put back at the end.
    synchronous: i64,
}

impl<'c> Batch<'c> {
    pub fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        let synchronous: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Checkpoints copy each page once however often the WAL holds it:
        // fewer, larger ones copy less (evi's connection alone). The WAL is
        // cut back to SQLite's usual size when evi's connection starts it
        // over.
        conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_PAGES)?;
        conn.pragma_update(None, "journal_size_limit", WAL_KEPT_BYTES)?;
        conn.pragma_update(None, "cache_size", CACHE_KIB)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(Self {
            conn,
            since: std::time::Instant::now(),
            open: true,
            synchronous,
        })
    }

    /// Lets OpenCode write, when this transaction has been open [`HOLD`].
    pub fn breathe(&mut self) -> rusqlite::Result<()> {
        if self.since.elapsed() >= HOLD {
            self.conn.execute_batch("COMMIT")?;
            self.open = false;
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            self.open = true;
            self.since = std::time::Instant::now();
        }
        Ok(())
    }

    /// Commits, then makes every transaction of the batch durable: the
    /// WAL's frames and what checkpoints copied into the database are
    /// flushed (an fsync of each file flushes every write to it, whoever
    /// made it).
    pub fn commit(mut self) -> Result<(), super::mirror::MirrorError> {
        self.open = false;
        self.conn.execute_batch("COMMIT")?;
        self.conn
            .pragma_update(None, "synchronous", self.synchronous)?;
        if let Some(path) = self.conn.path().filter(|p| !p.is_empty()) {
            let db = Path::new(path);
            let mut wal = db.as_os_str().to_owned();
            wal.push("-wal");
            for f in [Path::new(&wal), db] {
                match std::fs::File::open(f) {
                    Ok(f) => f.sync_all()?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}

/// Pages between evi's checkpoints (SQLite's default is 1,000).
const CHECKPOINT_PAGES: i64 = 8_000;

/// What of the WAL file evi leaves when it starts it over: SQLite's
/// default checkpoint's worth.
const WAL_KEPT_BYTES: i64 = 4 << 20;

/// Evi's page cache on OpenCode's database, in KiB (SQLite's default is
/// 2,000): the indexes a fresh pull inserts into stay in it.
const CACHE_KIB: i64 = -8_000;

impl std::ops::Deref for Batch<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.execute_batch("ROLLBACK");
            let _ = self
                .conn
                .pragma_update(None, "synchronous", self.synchronous);
        }
    }
}

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

/// The columns of the tables evi reads and writes, read once per
/// connection (a `PRAGMA table_info` per row cost as much as the row).
pub struct Schema {
    cols: HashMap<&'static str, Vec<String>>,
    /// The `INSERT` of a row of every column, by table: a line holds every
    /// column of its table when both devices run the same OpenCode, and
    /// building the statement's text per row cost a third of the insert.
    insert_all: HashMap<&'static str, String>,
}

impl Schema {
    pub fn read(conn: &Connection) -> rusqlite::Result<Self> {
        let mut cols = HashMap::new();
        let mut insert_all = HashMap::new();
        for t in row::TABLES.into_iter().chain(["project"]) {
            let c = columns(conn, t)?;
            insert_all.insert(t, insert_new_sql(t, &c));
            cols.insert(t, c);
        }
        Ok(Self { cols, insert_all })
    }

    /// The columns of `table` (none for a table evi does not know).
    pub fn cols(&self, table: &str) -> &[String] {
        self.cols.get(table).map_or(&[], Vec::as_slice)
    }
}

/// `INSERT INTO table (cols…) VALUES (?1…) ON CONFLICT DO NOTHING`.
fn insert_new_sql<C: AsRef<str>>(table: &str, cols: &[C]) -> String {
    format!("{} ON CONFLICT DO NOTHING", insert_sql(table, cols))
}

/// `INSERT INTO table (cols…) VALUES (?1…)`.
fn insert_sql<C: AsRef<str>>(table: &str, cols: &[C]) -> String {
    format!(
        "INSERT INTO \"{table}\" ({}) VALUES ({})",
        cols.iter()
            .map(|c| format!("\"{}\"", c.as_ref()))
            .collect::<Vec<_>>()
            .join(", "),
        (1..=cols.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The sessions in the database, by id.
pub fn session_ids(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("SELECT id FROM session ORDER BY time_created, id")?;
    let ids = st.query_map([], |r| r.get::<_, String>(0))?;
    ids.collect()
}

/// A cheap fingerprint of each session's rows, by session id: its session
/// row's line whole, and per table of its messages and parts the number of
/// rows, the sum of their `time_updated` and of their `data`'s length in
/// bytes (SQLite tells that without reading the value). OpenCode sets
/// `time_updated` at every change of a row, so a changed row changes the
/// fingerprint; one query per table over every session, so that a refresh
/// with nothing to do reads no row of a session whole. `None` for `only`
/// no such session.
pub fn fingerprints(
    conn: &Connection,
    schema: &Schema,
    only: Option<&str>,
) -> rusqlite::Result<HashMap<String, String>> {
    let mut out: HashMap<String, String> = HashMap::new();
    let cols = schema.cols("session");
    let filter = if only.is_some() { " WHERE id = ?1" } else { "" };
    let mut st = conn.prepare_cached(&format!("SELECT * FROM session{filter}"))?;
    let params: Vec<&str> = only.into_iter().collect();
    let mut rows = st.query(rusqlite::params_from_iter(&params))?;
    while let Some(r) = rows.next()? {
        let id: String = r.get("id")?;
        let line = line_of(r, "session", None, cols)?;
        out.insert(id, hex::encode(&Sha256::digest(&line)[..16]));
    }
    for table in ["message", "part"] {
        let filter = if only.is_some() {
            " WHERE session_id = ?1"
        } else {
            ""
        };
        let mut st = conn.prepare_cached(&format!(
            "SELECT session_id, count(*), sum(time_updated), sum(octet_length(data)) \
             FROM \"{table}\"{filter} GROUP BY session_id"
        ))?;
        let mut rows = st.query(rusqlite::params_from_iter(&params))?;
        while let Some(r) = rows.next()? {
            let id: String = r.get(0)?;
            let (n, t, len): (i64, Option<i64>, Option<i64>) = (r.get(1)?, r.get(2)?, r.get(3)?);
            if let Some(fp) = out.get_mut(&id) {
                use std::fmt::Write;
                let _ = write!(fp, "/{n},{},{}", t.unwrap_or(0), len.unwrap_or(0));
            }
        }
    }
    Ok(out)
}

/// What of a message row's `data` says whether it is finished (the rest
/// is passed over unread).
#[derive(serde::Deserialize)]
struct MessageData {
    role: Option<String>,
    time: Option<MessageTime>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct MessageTime {
    completed: Option<serde::de::IgnoredAny>,
}

/// Whether a message row's `data` says it is finished: a user message, or
/// an assistant message completed or failed.
fn finished(data: &MessageData) -> bool {
    data.role.as_deref() == Some("user")
        || data.time.as_ref().is_some_and(|t| t.completed.is_some())
        || data.error.is_some()
}

/// A row's line as [`session_lines`] hands it over, with what it knows of
/// it without parsing the line again.
pub struct RowLine {
    pub table: &'static str,
    pub id: String,
    pub line: Vec<u8>,
}

impl RowLine {
    fn of(
        r: &rusqlite::Row<'_>,
        table: &'static str,
        role: Option<&str>,
        cols: &[String],
    ) -> rusqlite::Result<Self> {
        let at = cols.iter().position(|c| c == "id");
        let id = match at {
            Some(i) => r.get::<_, String>(i)?,
            None => String::new(),
        };
        Ok(Self {
            table,
            id,
            line: line_of(r, table, role, cols)?,
        })
    }

    /// The row object's text ([`row::Line::row_text`]): the line is
    /// `{"table":…,["role":…,]"row":{…}}`, and no string before the row
    /// can hold an unescaped quote.
    pub fn row_text(&self) -> &str {
        let start = memchr::memmem::find(&self.line, b",\"row\":").map_or(0, |i| i + 7);
        let end = self.line.len().saturating_sub(1).max(start);
        std::str::from_utf8(&self.line[start..end]).unwrap_or_default()
    }
}

/// Hands `f` the lines of session `id`'s rows as they are now, one at a
/// time: its session row, its finished messages in order (with `every`,
/// those in flight too), each followed by its parts.
pub fn session_lines<E: From<rusqlite::Error>>(
    conn: &Connection,
    schema: &Schema,
    id: &str,
    every: bool,
    mut f: impl FnMut(RowLine) -> Result<(), E>,
) -> Result<(), E> {
    let cols = schema.cols("session");
    let mut st = conn.prepare_cached("SELECT * FROM session WHERE id = ?1")?;
    let mut rows = st.query([id])?;
    while let Some(r) = rows.next()? {
        f(RowLine::of(r, "session", None, cols)?)?;
    }
    let cols = schema.cols("message");
    let data_at = cols.iter().position(|c| c == "data");
    let pcols = schema.cols("part");
    let mut st = conn
        .prepare_cached("SELECT * FROM message WHERE session_id = ?1 ORDER BY time_created, id")?;
    let mut parts = conn.prepare_cached("SELECT * FROM part WHERE message_id = ?1 ORDER BY id")?;
    let mut rows = st.query([id])?;
    while let Some(r) = rows.next()? {
        let data: Option<MessageData> = data_at
            .and_then(|i| r.get_ref(i).ok())
            .and_then(|v| v.as_bytes().ok())
            .and_then(|d| serde_json::from_slice(d).ok());
        if !every && !data.as_ref().is_some_and(finished) {
            continue;
        }
        let role = data.and_then(|d| d.role);
        let message = RowLine::of(r, "message", None, cols)?;
        let mut prows = parts.query([&message.id])?;
        f(message)?;
        while let Some(p) = prows.next()? {
            f(RowLine::of(p, "part", role.as_deref(), pcols)?)?;
        }
    }
    Ok(())
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

/// The line of row `id` of `table` as the database holds it now, `None`
/// when it has no such row.
pub fn current(
    tx: &Connection,
    schema: &Schema,
    table: &str,
    id: &str,
) -> rusqlite::Result<Option<Vec<u8>>> {
    let cols = schema.cols(table);
    let mut st = tx.prepare_cached(&format!("SELECT * FROM \"{table}\" WHERE id = ?1"))?;
    st.query_row([id], |r| line_of(r, table, None, cols))
        .optional()
}

/// The columns of `line`'s row that its table has, with their values.
fn known_values(schema: &Schema, line: &Line<'_>) -> Vec<(String, Value)> {
    let have = schema.cols(&line.table);
    line.values()
        .into_iter()
        .filter(|(c, _)| have.contains(c))
        .collect()
}

/// Inserts `line`'s row unless its table has a row of that id already
/// (`ON CONFLICT DO NOTHING`: only the key; a row that breaks another rule,
/// a column it lacks or a foreign key, fails, and its transaction with it);
/// whether it went in. Columns the table does not have are left out.
pub fn insert_new(tx: &Connection, schema: &Schema, line: &Line<'_>) -> rusqlite::Result<bool> {
    let have = schema.cols(&line.table);
    let vals = known_values(schema, line);
    // Every column, in this table's order.
    let every = vals.len() == have.len() && vals.iter().zip(have).all(|((c, _), h)| c == h);
    let sql = match schema.insert_all.get(line.table.as_str()) {
        Some(sql) if every => std::borrow::Cow::Borrowed(sql.as_str()),
        _ => {
            let cols: Vec<&str> = vals.iter().map(|(c, _)| c.as_str()).collect();
            std::borrow::Cow::Owned(insert_new_sql(&line.table, &cols))
        }
    };
    let n = tx
        .prepare_cached(&sql)?
        .execute(rusqlite::params_from_iter(vals.into_iter().map(|(_, v)| v)))?;
    Ok(n == 1)
}

/// Updates the row of `line`'s id to `line`. Columns the table does not
/// have are left out.
pub fn update(tx: &Connection, schema: &Schema, line: &Line<'_>) -> rusqlite::Result<()> {
    let vals = known_values(schema, line);
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
    tx.prepare_cached(&sql)?
        .execute(rusqlite::params_from_iter(params))?;
    Ok(())
}

/// Inserts a row of `vals` (column, value) into `table`.
fn insert<C: AsRef<str>>(
    tx: &Connection,
    table: &str,
    vals: Vec<(C, Value)>,
) -> rusqlite::Result<()> {
    let cols: Vec<&C> = vals.iter().map(|(c, _)| c).collect();
    tx.prepare_cached(&insert_sql(table, &cols))?
        .execute(rusqlite::params_from_iter(vals.into_iter().map(|(_, v)| v)))?;
    Ok(())
}

/// Makes sure the project a pulled session names is in the `project`
/// table, with this device's `directory` as its worktree: OpenCode finds a
/// session through its project (its id is the repository's, the same on
/// every clone with the same remote), and updates the row itself when it
/// starts there.
pub fn ensure_project(
    tx: &Connection,
    schema: &Schema,
    session: &Line<'_>,
) -> rusqlite::Result<()> {
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
    let cols = schema.cols("project");
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
pub fn delete_session(tx: &Connection, id: &str) -> rusqlite::Result<usize> {
    let parts = tx.execute(
        "DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE session_id = ?1)",
        [id],
    )?;
    let messages = tx.execute("DELETE FROM message WHERE session_id = ?1", [id])?;
    let sessions = tx.execute("DELETE FROM session WHERE id = ?1", [id])?;
    Ok(parts + messages + sessions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_lines_row_text_is_the_one_a_parse_reads() {
        let cols: Vec<String> = ["id", "data"].map(String::from).to_vec();
        let data = br#"{"text":"a \",\"row\": b","n":1}"#;
        for role in [None, Some("assistant")] {
            let line = row::line(
                "part",
                role,
                &cols,
                &[ValueRef::Text(b"prt_1"), ValueRef::Text(data)],
            );
            let r = RowLine {
                table: "part",
                id: "prt_1".into(),
                line: line.clone(),
            };
            assert_eq!(r.row_text(), row::Line::parse(&line).unwrap().row_text);
        }
    }
}
