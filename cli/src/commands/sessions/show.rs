//! `evi sessions show`: the active branch, readable, and where the other
//! branches fork.

use std::io::Write;

use clap::Args;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{finish, fmt_minute, fmt_second, load, load_tree, stdout};
use crate::message::{Message, one_line};
use crate::source::Agent;
use crate::transcript::SessionTree;
use crate::transcript::line::LineFault;
use crate::transcript::view::{PageRequest, TreeIndex};

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Print JSON (stable, documented in docs/json.md): the active branch, or
    /// the branch through `--through`, with every fork's choices.
    #[arg(long)]
    pub json: bool,
    /// Show the branch through this entry (id or prefix, as `evi sessions
    /// search` prints it), to its newest leaf; the entry is marked.
    #[arg(long, value_name = "ENTRY")]
    pub through: Option<String>,
    /// List where this device's pushes replaced a secret in the session
    /// (file, line, entry, rule; never the secret), instead of the session.
    #[arg(long, conflicts_with = "through")]
    pub redactions: bool,
}

/// Lines of tool output shown before the rest is summarised.
const TOOL_LINES: usize = 6;

pub fn cmd_sessions_show(ctx: &Ctx, args: ShowArgs) -> CommandResult {
    if args.redactions {
        return super::redactions::show_redactions(ctx, &args.id, args.json);
    }
    if args.json {
        return show_json(ctx, &args);
    }
    let tree = load_tree(ctx, &args.id)?;
    let through = match args.through.as_deref() {
        Some(p) => Some(through_entry(&tree, p)?),
        None => None,
    };
    let active = match through {
        Some(i) => tree.path_to(tree.newest_leaf_under()[i]),
        None => tree.active_branch(),
    };
    let others = tree.other_branches(&active);
    let mut out = stdout();
    let span = match (
        active.iter().find_map(|&i| tree.entries[i].ts),
        active.iter().rev().find_map(|&i| tree.entries[i].ts),
    ) {
        (Some(a), Some(b)) => format!(", {} → {}", fmt_minute(a), fmt_minute(b)),
        _ => String::new(),
    };
    let whose = match tree.agent {
        Agent::Evi => String::new(),
        a => format!("{} ", a.name()),
    };
    writeln!(
        out,
        "{whose}session {} ({} messages, {} branch{}{span})",
        tree.id,
        active.len(),
        others.len() + 1,
        if others.is_empty() { "" } else { "es" },
    )?;
    if let Some(title) = tree.latest_title()? {
        writeln!(out, "title: {title}")?;
    }
    if let Some(project) = &tree.project {
        writeln!(out, "project: {project}")?;
    }
    let mut fetch = tree.fetcher();
    for (n, &i) in active.iter().enumerate() {
        let raw = fetch.fetch(tree.entries[i].at)?;
        let msg = Message::of(tree.agent, &raw);
        writeln!(out)?;
        write_message(&mut out, &tree, n + 1, i, &msg, through == Some(i))?;
    }
    if tree.pending_bytes > 0 {
        writeln!(
            out,
            "\n(a line is still being written: {} bytes)",
            tree.pending_bytes
        )?;
    }
    if !others.is_empty() {
        writeln!(out, "\nother branches ({}):", others.len())?;
        for b in &others {
            let leaf = &tree.entries[b.leaf];
            let preview = Message::of(tree.agent, &fetch.fetch(leaf.at)?).text;
            let at = match b.fork {
                Some(f) => {
                    let pos = active.iter().position(|&a| a == f).map_or(0, |p| p + 1);
                    format!("forks after #{pos} ({})", short(&tree.entries[f].id))
                }
                None => "separate root".to_owned(),
            };
            writeln!(
                out,
                "  {at}: {} message{}, leaf {}: {}",
                b.len,
                if b.len == 1 { "" } else { "s" },
                short(&leaf.id),
                one_line(&preview, 60)
            )?;
        }
    }
    finish(out)
}

fn show_json(ctx: &Ctx, args: &ShowArgs) -> CommandResult {
    let (tree, short_id) = load(ctx, &args.id)?;
    let index = TreeIndex::new(tree, short_id)?;
    let page = index
        .page(&PageRequest {
            through: args.through.as_deref(),
            ..PageRequest::default()
        })
        .map_err(user_error)?;
    let mut out = stdout();
    serde_json::to_writer_pretty(&mut out, &page).map_err(std::io::Error::from)?;
    writeln!(out)?;
    finish(out)
}

/// The entry `--through` names, as an error people can act on.
fn through_entry(tree: &SessionTree, prefix: &str) -> Result<usize, CommandError> {
    tree.find_entry(prefix).map_err(|found| {
        let msg = match found.len() {
            0 => format!("session {} has no entry `{prefix}`", tree.id),
            n => format!("`{prefix}` matches {n} entries of session {}", tree.id),
        };
        user_error(msg).hinted("`evi sessions show ID --json` lists every entry id")
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

fn write_message(
    out: &mut impl Write,
    tree: &SessionTree,
    n: usize,
    i: usize,
    msg: &Message,
    marked: bool,
) -> std::io::Result<()> {
    let e = &tree.entries[i];
    let when = e.ts.map(fmt_second).unwrap_or_default();
    if let Some(fault) = msg.fault {
        let what = match fault {
            LineFault::NotJson => "not valid JSON",
            LineFault::NotUtf8 => "not valid UTF-8",
        };
        let file = &tree.files[e.at.file];
        writeln!(
            out,
            "#{n} ! invalid line ({what}) in {}/{}, kept as is:",
            file.day,
            file.path.file_name().unwrap_or_default().to_string_lossy()
        )?;
        return writeln!(out, "{}", msg.text);
    }
    let who = match &msg.tool_name {
        Some(t) if msg.role == "tool" => format!("tool {t}"),
        _ => msg.role.clone(),
    };
    let mark = if marked {
        format!("  ◀ {}", short(&e.id))
    } else {
        String::new()
    };
    writeln!(out, "#{n} {who}  {when}{mark}")?;
    if let Some(r) = &msg.reasoning {
        writeln!(out, "  (thinking)")?;
        for l in r.lines() {
            writeln!(out, "  {l}")?;
        }
    }
    if msg.role == "tool" {
        let lines: Vec<&str> = msg.text.lines().collect();
        for l in lines.iter().take(TOOL_LINES) {
            writeln!(out, "  {l}")?;
        }
        if lines.len() > TOOL_LINES {
            writeln!(out, "  … ({} more lines)", lines.len() - TOOL_LINES)?;
        }
    } else if !msg.text.is_empty() {
        writeln!(out, "{}", msg.text)?;
    }
    for c in &msg.tool_calls {
        writeln!(out, "  → {}({})", c.name, one_line(&c.arguments, 100))?;
    }
    Ok(())
}
