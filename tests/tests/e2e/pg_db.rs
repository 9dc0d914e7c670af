//! A Postgres database per test server, for the run on Postgres
//! (`on_postgres.rs`) and the tests that need one whatever the run
//! (`replicas.rs`).

pub use crate::on_postgres::Backend;

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

/// A database of its own on the test Postgres, empty when taken, from
/// the pool of [`crate::pg_pool`] (given back with the value).
pub struct TestDb {
    pub url: String,
    _slot: crate::pg_pool::PooledDb,
}

impl TestDb {
    pub fn create() -> Self {
        let slot = crate::pg_pool::PooledDb::take(&postgres_url());
        Self {
            url: slot.url.clone(),
            _slot: slot,
        }
    }
}
