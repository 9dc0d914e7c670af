// Shared by the SQLite and Postgres targets, which each use a part of it.
#![allow(dead_code)]

//! A Postgres database per test server, for the Postgres target.

/// Where the started servers keep their metadata; each target's main.rs
/// names one as `BACKEND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The SQLite file in the data folder (no `--database`).
    Sqlite,
    /// A fresh database per server on `EVI_TEST_POSTGRES_URL`'s server.
    Postgres,
}

/// The test Postgres. Unset outside CI: the whole target is skipped,
/// saying so (the process ends with success at the first server it would
/// start); under `CI=true` that is a failure.
pub fn postgres_url() -> String {
    match std::env::var("EVI_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => u,
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "EVI_TEST_POSTGRES_URL is unset under CI=true: the Postgres tests must run there"
            )
        }
        _ => {
            let msg = "SKIPPED: this Postgres test target needs EVI_TEST_POSTGRES_URL \
                       (e.g. postgres://postgres@127.0.0.1:5432/test); none of its tests ran";
            // Straight to the descriptors: the test harness captures
            // println! and eprintln!, and the exit below would swallow them.
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout(), "{msg}");
            let _ = writeln!(std::io::stderr(), "{msg}");
            std::process::exit(0);
        }
    }
}

fn exec(url: &str, sql: &str) {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("cannot connect to the test Postgres: {e}"));
            tokio::spawn(conn);
            client.batch_execute(&sql).await.unwrap();
        })
    })
    .join()
    .unwrap()
}

/// Runs `sql` (one or more statements) on the database `url` names; the
/// rows the statements return, each value as Postgres prints it. A thread
/// of its own, so it works wherever a test is.
pub fn query(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("cannot connect to the test Postgres: {e}"));
            tokio::spawn(conn);
            let mut rows = Vec::new();
            for m in client
                .simple_query(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
            {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect());
                }
            }
            rows
        })
    })
    .join()
    .unwrap()
}

/// A database of its own on the test Postgres, dropped with the value.
pub struct TestDb {
    pub url: String,
    name: String,
    admin: String,
}

impl TestDb {
    pub fn create() -> Self {
        let admin = postgres_url();
        let name = format!(
            "evi_t_{}",
            ulid::Ulid::new().to_string().to_ascii_lowercase()
        );
        exec(&admin, &format!("CREATE DATABASE {name}"));
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (admin.as_str(), String::new()),
        };
        let (server, _) = base.rsplit_once('/').expect("a URL with a database");
        Self {
            url: format!("{server}/{name}{query}"),
            name,
            admin,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        exec(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
