//! Versioned migrations, run at start under a Postgres advisory lock.
//!
//! Every replica runs [`run`] as it starts. The lock (a session lock on a
//! connection of its own, so it goes with that connection however the
//! process ends) lets one replica migrate while the others wait, then find
//! nothing left to do. A database holding a version this binary does not
//! have was migrated by a newer server: this one refuses to start rather
//! than write rows a schema it does not know may no longer take.

use super::OpenError;

/// One step of the schema's history, applied once, in version order.
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../../migrations/postgres/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "pair_slots",
        sql: include_str!("../../../migrations/postgres/0002_pair_slots.sql"),
    },
    Migration {
        version: 3,
        name: "forgotten_streams",
        sql: include_str!("../../../migrations/postgres/0003_forgotten_streams.sql"),
    },
    Migration {
        version: 4,
        name: "blob_refs",
        sql: include_str!("../../../migrations/postgres/0004_blob_refs.sql"),
    },
    Migration {
        version: 5,
        name: "key_rotation",
        sql: include_str!("../../../migrations/postgres/0005_key_rotation.sql"),
    },
    Migration {
        version: 6,
        name: "blob_parts",
        sql: include_str!("../../../migrations/postgres/0006_blob_parts.sql"),
    },
    Migration {
        version: 7,
        name: "change_notices",
        sql: include_str!("../../../migrations/postgres/0007_change_notices.sql"),
    },
    Migration {
        version: 8,
        name: "moved_in",
        sql: include_str!("../../../migrations/postgres/0008_moved_in.sql"),
    },
    Migration {
        version: 9,
        name: "compaction_grace",
        sql: include_str!("../../../migrations/postgres/0009_compaction_grace.sql"),
    },
    Migration {
        version: 10,
        name: "rotation_owner",
        sql: include_str!("../../../migrations/postgres/0010_rotation_owner.sql"),
    },
    Migration {
        version: 11,
        name: "stream_groups",
        sql: include_str!("../../../migrations/postgres/0011_stream_groups.sql"),
    },
    Migration {
        version: 12,
        name: "entries_by_seq",
        sql: include_str!("../../../migrations/postgres/0012_entries_by_seq.sql"),
    },
    Migration {
        version: 13,
        name: "pair_minted",
        sql: include_str!("../../../migrations/postgres/0013_pair_minted.sql"),
    },
    Migration {
        version: 14,
        name: "pair_minted_device",
        sql: include_str!("../../../migrations/postgres/0014_pair_minted_device.sql"),
    },
    Migration {
        version: 15,
        name: "key_proof",
        sql: include_str!("../../../migrations/postgres/0015_key_proof.sql"),
    },
    Migration {
        version: 16,
        name: "account_disabled",
        sql: include_str!("../../../migrations/postgres/0016_account_disabled.sql"),
    },
    Migration {
        version: 17,
        name: "operator_settings",
        sql: include_str!("../../../migrations/postgres/0017_operator_settings.sql"),
    },
];

/// The table of applied versions.
pub const TABLE: &str = "evi_schema_migrations";

/// The advisory lock's key: any constant no other program on the database
/// uses (b"evisync" read as a number).
const LOCK_KEY: i64 = 0x0065_7669_7379_6e63;

/// The newest version this binary has.
pub fn newest_known() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Applies the migrations the database lacks, or refuses a newer schema.
pub async fn run(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    target: &str,
) -> Result<(), OpenError> {
    let (mut client, connection) =
        config
            .connect(tls)
            .await
            .map_err(|source| OpenError::Unreachable {
                target: target.to_owned(),
                source,
            })?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "migration connection ended");
        }
    });
    let migrate_err = |source| OpenError::Migrate {
        target: target.to_owned(),
        source,
    };
    let result = async {
        client
            .execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])
            .await
            .map_err(migrate_err)?;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {TABLE} (
                    version    BIGINT PRIMARY KEY,
                    name       TEXT NOT NULL,
                    applied_at BIGINT NOT NULL
                )"
            ))
            .await
            .map_err(migrate_err)?;
        let found: Option<i64> = client
            .query_one(&format!("SELECT MAX(version) FROM {TABLE}"), &[])
            .await
            .map_err(migrate_err)?
            .get(0);
        let found = found.unwrap_or(0);
        let known = newest_known();
        if found > known {
            return Err(OpenError::NewerSchema {
                target: target.to_owned(),
                found,
                known,
            });
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > found) {
            let tx = client.transaction().await.map_err(migrate_err)?;
            tx.batch_execute(m.sql).await.map_err(migrate_err)?;
            tx.execute(
                &format!("INSERT INTO {TABLE} (version, name, applied_at) VALUES ($1, $2, $3)"),
                &[&m.version, &m.name, &chrono::Utc::now().timestamp()],
            )
            .await
            .map_err(migrate_err)?;
            tx.commit().await.map_err(migrate_err)?;
            tracing::info!(
                version = m.version,
                name = m.name,
                "applied database migration"
            );
        }
        Ok(())
    }
    .await;
    // Closing the connection ends the session and so frees the lock.
    drop(client);
    let _ = driver.await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The triggers announce on the channel the listener takes.
    #[test]
    fn changes_are_announced_on_the_listeners_channel() {
        let m = MIGRATIONS
            .iter()
            .find(|m| m.name == "change_notices")
            .unwrap();
        let channel = format!("pg_notify('{}',", super::super::CHANNEL);
        assert_eq!(m.sql.matches("pg_notify(").count(), 3, "{}", m.sql);
        assert_eq!(m.sql.matches(&channel).count(), 3, "{}", m.sql);
    }
}
