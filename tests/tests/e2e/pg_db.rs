//! A Postgres database per test server, for the run on Postgres
//! (`on_postgres.rs`) and the tests that need one whatever the run
//! (`replicas.rs`).

/// Where the started servers keep their metadata: [`Backend::of_this_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The SQLite file in the data folder (no `--database`).
    Sqlite,
    /// A fresh database per server on `EVI_TEST_POSTGRES_URL`'s server.
    Postgres,
}

impl Backend {
    /// This process's: Postgres in the run `again_on_postgres` starts
    /// (`EVI_TEST_BACKEND=postgres`, which also runs some tests there by
    /// hand), SQLite otherwise.
    pub fn of_this_run() -> Self {
        match std::env::var(crate::on_postgres::BACKEND_VAR).as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("" | "sqlite") => Self::Sqlite,
            Ok("postgres") => Self::Postgres,
            other => panic!(
                "{}={other:?}: say `sqlite` (the default) or `postgres`",
                crate::on_postgres::BACKEND_VAR
            ),
        }
    }
}

/// The test Postgres. The tests that need one are built ignored without
/// it (`evi_no_postgres`, see `tests/build.rs`) outside CI, so reaching
/// this without one means a run asked for by hand (or CI lacking it).
pub fn postgres_url() -> String {
    match std::env::var("EVI_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "EVI_TEST_POSTGRES_URL is unset: set it to a Postgres where the tests may create \
             and drop databases (e.g. postgres://postgres@127.0.0.1:5432/test)"
        ),
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
