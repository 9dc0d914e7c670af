//! The schema's history: the steps `SqliteStore::open` runs, each in its
//! own immediate transaction, counted by the file's `user_version`.

use rusqlite::{Connection, TransactionBehavior, params};

use super::*;

/// One step of the schema's history; the database's `user_version` says
/// how many have run.
enum Migration {
    Sql(&'static str),
    /// A step that needs the server's own constants.
    Code(fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>),
}

/// The `user_version` of a database this server has migrated: what
/// `evi-server backup` and `restore` expect (see [`crate::backup`]).
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

const MIGRATIONS: &[Migration] = &[
    Migration::Sql(include_str!("../../../migrations/sqlite/0001_init.sql")),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0002_record_device.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0003_record_bodies.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0004_user_name_nocase.sql"
    )),
    Migration::Code(recount_usage),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0005_entry_id_bytes.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0006_records_by_stream.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0007_damaged_records.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0008_pair_slots.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0009_forgotten_streams.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0010_blob_refs.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0011_key_rotation.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0012_blob_parts.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0013_compaction_grace.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0014_rotation_owner.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0015_stream_groups.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0016_entries_by_seq.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0017_pair_minted.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0018_pair_minted_device.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0019_key_proof.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0020_account_disabled.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0021_operator_settings.sql"
    )),
];

/// Sets every account's `bytes_used` to what it stores as [`record_cost`]
/// and [`blob_cost`] count it (before, only ciphertext and blob bytes
/// counted). A record's entry ids are its `entry_ids` text: n ids of 64
/// characters and n - 1 commas.
fn recount_usage(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE users SET bytes_used =
           COALESCE((SELECT SUM(COALESCE(body_len, length(ciphertext)) + ?1
                                + ?2 * ((length(entry_ids) + 1) / 65))
                     FROM records r WHERE r.user_id = users.id), 0)
         + COALESCE((SELECT SUM(size + ?3) FROM blobs b WHERE b.user_id = users.id), 0)",
        params![
            RECORD_ROW_BYTES as i64,
            ENTRY_ID_BYTES as i64,
            BLOB_ROW_BYTES as i64
        ],
    )?;
    Ok(())
}

/// Applies the steps the database lacks, or refuses a newer schema (read
/// before anything is written).
pub(super) fn migrate(c: &mut Connection) -> Result<(), OpenError> {
    let version: usize = c.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(OpenError::NewerSchema {
            found: version,
            known: MIGRATIONS.len(),
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        match step {
            Migration::Sql(sql) => tx.execute_batch(sql)?,
            Migration::Code(f) => f(&tx)?,
        }
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(())
}
