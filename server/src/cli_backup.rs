//! `evi-server backup` and `evi-server restore` as the operator types
//! them: steps on stderr, one summary line on stdout (see
//! [`evi_server::backup`] for what they promise). Part of the binary only.

use std::path::PathBuf;

use evi_server::Config;
use evi_server::backup::{self, BackupError, BackupOptions};

use crate::Failure;

fn failure(e: BackupError) -> Failure {
    let f = match e {
        BackupError::NotEmbedded(_) => Failure::usage(e.to_string()),
        _ => Failure::new(e.to_string()),
    };
    match e.hint() {
        Some(h) => f.hinted(h),
        None => f,
    }
}

/// Runs `work` on a blocking thread: it reads and writes files for as long
/// as the data takes.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BackupError> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Failure::new(format!("the work stopped: {e}")))?
        .map_err(failure)
}

pub async fn backup(config: &Config, output: PathBuf, force: bool) -> Result<(), Failure> {
    let opts = BackupOptions::new(config, output, force).map_err(failure)?;
    let r = blocking(move || backup::backup(&opts, &|line| eprintln!("{line}"))).await?;
    println!(
        "backed up {} accounts, {} records, {} packs, {} blobs: {} bytes in {}{}",
        r.accounts,
        r.records,
        r.packs,
        r.blobs,
        r.bytes,
        r.output.display(),
        match r.snapshots {
            1 => String::new(),
            n => format!(" ({n} snapshots: files went meanwhile)"),
        }
    );
    Ok(())
}

pub async fn restore(config: &Config, input: PathBuf) -> Result<(), Failure> {
    if config.database.is_some() || config.store.is_some() {
        return Err(Failure::usage(
            "evi-server restore makes a --data folder with bodies and blobs inside; \
             it takes no --database or --store",
        )
        .hinted(
            "restore into --data DIR alone; for a file:// store, move DIR/bodies and \
             DIR/blobs there afterwards",
        ));
    }
    let data = config.data_dir.clone();
    let r = blocking(move || backup::restore(&input, &data, &|line| eprintln!("{line}"))).await?;
    println!(
        "restored {} accounts, {} records, {} packs, {} blobs: {} bytes in {} \
         (integrity check ok, every body and blob present)",
        r.accounts,
        r.records,
        r.packs,
        r.blobs,
        r.bytes,
        r.data_dir.display()
    );
    Ok(())
}
