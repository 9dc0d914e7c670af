//! What the server keeps, read whole (SECURITY.md, "What the server
//! sees"): after two devices sync a generated home, hand-written sessions,
//! checkpoint journals and their blobs both ways, everything the server has
//! is dumped: every table and column of its database (as text and as raw
//! bytes), every file (name and bytes) under its data folder, and its
//! output at its most verbose log level. None of it may hold a session id, an entry id, a file
//! path from a journal, a distinctive piece of any line, journal line or
//! blob, a device's host name, or the plain SHA-256 of a line or a blob
//! (hex or raw): the server holds only keyed ids and ciphertext.
//!
//! The device names are chosen with `--device`: the server does see those
//! (register, login and the device list need them), so the host names are
//! what eVi writes into the content.

use std::collections::BTreeSet;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::common::{Device, TestServer, held, sessions, today, tree};
use crate::sync_journal::checkpoint;

const HOSTS: [&str; 2] = ["fennel-laptop.example.lan", "juniper-desktop.example.lan"];

/// What must not be found, and why.
struct Needles(Vec<(String, Vec<u8>)>);

impl Needles {
    fn add(&mut self, what: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        let bytes = bytes.into();
        // A string this short could turn up in a log by chance.
        if bytes.len() >= 8 {
            self.0.push((what.into(), bytes));
        }
    }

    /// Hex and raw of the plain SHA-256 of `bytes`.
    fn hashes(&mut self, what: &str, bytes: &[u8]) {
        let digest = Sha256::digest(bytes);
        self.add(format!("SHA-256 of {what} (hex)"), hex(&digest));
        self.add(format!("SHA-256 of {what} (raw)"), digest.to_vec());
    }

    /// A distinctive piece of `line`: 24 bytes from its middle (or all of
    /// a shorter one).
    fn piece(&mut self, what: &str, line: &[u8]) {
        if line.len() < 12 {
            return;
        }
        let start = line.len().saturating_sub(24) / 2;
        let end = (start + 24).min(line.len());
        self.add(format!("a piece of {what}"), &line[start..end]);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Everything of `dev`'s home the server must not learn.
fn secrets_of(dev: &Device, n: &mut Needles) {
    for s in sessions(dev) {
        n.add(format!("session id {s}"), s.as_bytes());
        for e in held(dev, &s) {
            n.add(format!("entry id {} of {s}", e.id), e.id.as_bytes());
            n.piece(&format!("a line of {s}"), &e.content);
            n.hashes(&format!("a line of {s}"), &e.content);
        }
    }
    for (rel, bytes) in tree(&dev.home().join("checkpoints")) {
        let Some(bytes) = bytes else { continue };
        if rel.ends_with("journal.jsonl") {
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line).unwrap();
                n.add(
                    "a journal's file path",
                    v["path"].as_str().unwrap().as_bytes(),
                );
                n.piece("a journal line", line);
                n.hashes("a journal line", line);
            }
        } else if rel.starts_with("blobs/") {
            n.piece(&format!("blob {rel}"), &bytes);
            n.hashes(&format!("blob {rel}"), &bytes);
        }
    }
}

/// Every table of the server's database (the SQLite file, or its Postgres
/// database), row by row, each value as text and as its raw bytes (blobs
/// also in hex, integers also as their bytes).
pub(crate) fn database_dump(srv: &TestServer) -> Vec<u8> {
    match &srv.db {
        Some(db) => postgres_dump(&db.url),
        None => sqlite_dump(&srv.data.path().join("evi-server.sqlite3")),
    }
}

/// [`database_dump`] of a Postgres database: values come as Postgres
/// prints them (`bytea` as `\x` and hex), so each is also added decoded.
fn postgres_dump(url: &str) -> Vec<u8> {
    let tables: Vec<String> = crate::pg_db::query(
        url,
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'",
    )
    .into_iter()
    .filter_map(|r| r[0].clone())
    .collect();
    assert!(tables.iter().any(|t| t == "records"), "{tables:?}");
    let mut out = Vec::new();
    for t in &tables {
        for row in crate::pg_db::query(url, &format!("SELECT * FROM \"{t}\"")) {
            for v in row.into_iter().flatten() {
                out.push(0);
                out.extend(v.as_bytes());
                if let Some(raw) = v.strip_prefix("\\x").and_then(|h| hex::decode(h).ok()) {
                    out.push(0);
                    out.extend(raw);
                } else if let Ok(n) = v.parse::<i64>() {
                    out.extend(n.to_le_bytes());
                    out.extend(n.to_be_bytes());
                }
            }
        }
    }
    out
}

fn sqlite_dump(db: &Path) -> Vec<u8> {
    use rusqlite::types::ValueRef;
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(tables.iter().any(|t| t == "records"), "{tables:?}");
    let mut out = Vec::new();
    for t in &tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let columns = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..columns {
                out.push(0);
                match row.get_ref(i).unwrap() {
                    ValueRef::Null => {}
                    ValueRef::Integer(v) => {
                        out.extend(v.to_string().into_bytes());
                        out.extend(v.to_le_bytes());
                        out.extend(v.to_be_bytes());
                    }
                    ValueRef::Real(v) => out.extend(v.to_string().into_bytes()),
                    ValueRef::Text(b) => out.extend(b),
                    ValueRef::Blob(b) => {
                        out.extend(b);
                        out.push(0);
                        out.extend(hex(b).into_bytes());
                    }
                }
            }
        }
    }
    out
}

/// Writes the test's corpus into a device: sessions and a journal naming
/// blobs, each line with something that names where it was written.
fn write_corpus(dev: &Device, host: &str, tag: &str) {
    let day = today();
    for s in 0..3 {
        let lines: String = (0..8)
            .map(|n| {
                format!(
                    "{{\"role\":\"user\",\"content\":\"{tag} session {s} turn {n}: ssh pat@{host} \
                     and look at /home/pat/{tag}-project-{s}/notes-{n}.md\",\"ts\":\"{day}T10:00:0{n}Z\"}}\n"
                )
            })
            .collect();
        dev.write(
            &day,
            &format!("{tag}-session-{s}-0123456789"),
            lines.as_bytes(),
        );
    }
    let journal: String = (1..=3)
        .map(|seq| {
            checkpoint(
                dev,
                seq,
                &format!("/home/pat@{host}/{tag}-src/module_{seq}.rs"),
                &format!("fn {tag}_prior_contents_{seq}() {{ /* written on {host} */ }}\n"),
            )
            .0
        })
        .collect();
    dev.put("checkpoints/journal.jsonl", journal.as_bytes());
}

#[test]
fn the_server_keeps_no_id_path_content_host_or_plain_hash() {
    let logs = tempfile::tempdir().unwrap();
    // The most verbose level the server has, its dependencies' too.
    let srv = TestServer::start_logged(&[], &[("EVI_SERVER_LOG", "trace")], logs.path());
    let (a, b) = (Device::new(), Device::new());
    a.generate(&["--sessions", "6", "--total-mb", "2", "--big-mb", "1"]);
    write_corpus(&a, HOSTS[0], "alder");
    write_corpus(&b, HOSTS[1], "birch");
    a.init(&srv, "pat", "laptop");
    b.join_copying_key(&a, &srv.url, "pat", "desktop");
    for dev in [&a, &b, &a] {
        dev.sync_ok(&["push"]);
        dev.sync_ok(&["pull"]);
    }
    // Both now hold both corpora (the audit below covers what each pushed
    // and what each pulled).
    assert_eq!(sessions(&a), sessions(&b));

    let mut n = Needles(Vec::new());
    secrets_of(&a, &mut n);
    secrets_of(&b, &mut n);
    for h in HOSTS {
        n.add(format!("host name {h}"), h.as_bytes());
    }

    let mut hay: Vec<(String, Vec<u8>)> = Vec::new();
    hay.push(("the database, table by table".into(), database_dump(&srv)));
    let mut roots = srv.file_roots();
    roots.push((logs.path().to_owned(), "output"));
    for (root, what) in &roots {
        // File names too: a blob or pack named by a plain hash would leak it.
        let names: Vec<u8> = tree(root)
            .keys()
            .flat_map(|k| k.bytes().chain([0]))
            .collect();
        hay.push((format!("the {what}'s file names"), names));
        for (rel, bytes) in tree(root) {
            if let Some(bytes) = bytes {
                hay.push((format!("{what}: {rel}"), bytes));
            }
        }
    }
    let logged = hay
        .iter()
        .filter(|(w, _)| w.starts_with("output: stderr"))
        .map(|(_, b)| b.len())
        .sum::<usize>();
    assert!(logged > 0, "the server logged nothing");
    assert!(
        hay.iter().any(|(w, _)| w.contains("bodies/")),
        "no record bodies on disk: {:?}",
        hay.iter().map(|(w, _)| w).collect::<Vec<_>>()
    );

    let mut found = BTreeSet::new();
    for (what, needle) in &n.0 {
        let finder = memchr::memmem::Finder::new(needle);
        for (place, bytes) in &hay {
            if let Some(at) = finder.find(bytes) {
                found.insert(format!("{what} in {place} at byte {at}"));
            }
        }
    }
    eprintln!(
        "metadata audit: {} needles in {} places ({} bytes)",
        n.0.len(),
        hay.len(),
        hay.iter().map(|(_, b)| b.len()).sum::<usize>()
    );
    assert!(
        found.is_empty(),
        "the server keeps what it must not see:\n  {}",
        found.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}
