//! Databases of their own for the tests on Postgres, taken from a pool
//! instead of created and dropped for each server. `DROP DATABASE` forces a
//! checkpoint on Postgres 15 (about 2 s on this machine, all tests waiting
//! on the same one), and a test on Postgres spent more time there than in
//! its own steps. A pooled database is emptied instead when it is taken
//! (its schemas dropped: no checkpoint), and kept when it is given back, so
//! that a failed test's rows can still be looked at.
//!
//! A slot is held with a session advisory lock on the admin database, so
//! that parallel tests, several test binaries and several checkouts on one
//! Postgres never share one; a test process that dies lets go of its slots
//! with its connections. The databases (`evi_pool_N`) stay between runs.
//!
//! Shared by the e2e tests and the server's API tests (included there by
//! path): only `tokio`, `tokio-postgres` and the standard library.

use std::sync::mpsc;
use std::thread::JoinHandle;

/// The advisory lock class of the pool's slots (the first key of
/// `pg_try_advisory_lock(int, int)`; the slot number is the second).
const LOCK_CLASS: i32 = 0x0e71_9001;
/// More slots than tests ever run at once.
const SLOTS: i32 = 512;

/// A database of the pool, emptied and held until dropped.
pub struct PooledDb {
    /// The database's URL: the admin URL with its database replaced.
    pub url: String,
    /// Its name (`evi_pool_N`), for the tests that name it in SQL.
    #[allow(dead_code)]
    pub name: String,
    release: Option<tokio::sync::oneshot::Sender<()>>,
    holder: Option<JoinHandle<()>>,
}

impl PooledDb {
    /// Takes a free slot on the server `admin` names, creating its database
    /// the first time and emptying it otherwise.
    pub fn take(admin: &str) -> Self {
        let (tx, rx) = mpsc::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let admin = admin.to_owned();
        let holder = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (lock, conn) = connect(&admin).await;
                let conn = tokio::spawn(conn);
                let mut slot = None;
                for n in 0..SLOTS {
                    let row = lock
                        .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_CLASS, &n])
                        .await
                        .expect("take an advisory lock on the test Postgres");
                    if row.get::<_, bool>(0) {
                        slot = Some(n);
                        break;
                    }
                }
                let n =
                    slot.unwrap_or_else(|| panic!("all {SLOTS} pooled test databases are taken"));
                let name = format!("evi_pool_{n}");
                let url = with_database(&admin, &name);
                empty(&lock, &name, &url).await;
                tx.send((name, url)).unwrap();
                // Held until the value is dropped; then the session ends,
                // and the lock with it.
                let _ = released.await;
                drop(lock);
                let _ = conn.await;
            });
        });
        let (name, url) = rx
            .recv()
            .unwrap_or_else(|_| panic!("taking a pooled test database failed (see above)"));
        Self {
            url,
            name,
            release: Some(release),
            holder: Some(holder),
        }
    }
}

impl Drop for PooledDb {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}

async fn connect(
    url: &str,
) -> (
    tokio_postgres::Client,
    impl std::future::Future<Output = Result<(), tokio_postgres::Error>> + use<>,
) {
    tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test Postgres: {e}"))
}

/// Makes database `name` exist and hold nothing: its sessions (a server a
/// dead test left) ended, every schema of its own dropped, `public` made
/// again.
async fn empty(admin: &tokio_postgres::Client, name: &str, url: &str) {
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .unwrap()
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        return;
    }
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .unwrap();
    let (db, conn) = connect(url).await;
    let conn = tokio::spawn(conn);
    let schemas: Vec<String> = db
        .query(
            "SELECT nspname::text FROM pg_namespace \
             WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut sql: String = schemas
        .iter()
        .map(|s| format!("DROP SCHEMA \"{s}\" CASCADE; "))
        .collect();
    sql.push_str("CREATE SCHEMA public;");
    db.batch_execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("emptying {name}: {e}"));
    drop(db);
    let _ = conn.await;
}

/// `admin` with its database (the last path segment) replaced by `name`,
/// its query kept.
fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (admin, String::new()),
    };
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    format!("{server}/{name}{query}")
}
