//! `evi sessions fork`: a new session holding the path root→entry of another.
//!
//! Lines are copied byte for byte: an entry's derived id depends only on its
//! parent and its bytes, and the path keeps every parent right before its
//! child, so the copied entries keep their ids in the new session.

use std::io::Write;

use chrono::Local;
use clap::Args;
use evi_shared::SessionId;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::load_tree;
use crate::fsutil::{persist_new, temp_beside};

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Fork at this entry (id or prefix); default the newest leaf.
    #[arg(long)]
    pub at: Option<String>,
}

pub fn cmd_sessions_fork(ctx: &Ctx, args: ForkArgs) -> CommandResult {
    let tree = load_tree(ctx, &args.id)?;
    let end = match &args.at {
        None => tree
            .active_leaf()
            .ok_or_else(|| user_error(format!("session {} has no entries to fork", tree.id)))?,
        Some(at) => tree.find_entry(at).map_err(|found| match found.len() {
            0 => user_error(format!("session {} has no entry `{at}`", tree.id))
                .hinted("`evi sessions export ID -f json` lists every entry id"),
            n => user_error(format!("entry prefix `{at}` matches {n} entries"))
                .hinted("type more characters of the entry id"),
        })?,
    };
    let path = tree.path_to(end);
    let new_id: SessionId = ulid::Ulid::new()
        .to_string()
        .parse()
        .expect("a ULID is a valid session id");
    let day = Local::now().format("%Y-%m-%d").to_string();
    let file = ctx
        .home
        .transcripts_dir()
        .join(&day)
        .join(format!("{new_id}.jsonl"));
    let cannot = |e: std::io::Error| user_error(format!("cannot write {}: {e}", file.display()));
    // Streamed line by line: a fork of a huge session needs no memory for it.
    let mut tmp = temp_beside(&file).map_err(cannot)?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        let mut fetch = tree.fetcher();
        for &i in &path {
            w.write_all(&fetch.fetch(tree.entries[i].at)?)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
    }
    persist_new(tmp, &file).map_err(cannot)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "forked {} → new session {new_id} ({} messages copied)",
        tree.id,
        path.len()
    )?;
    Ok(())
}
