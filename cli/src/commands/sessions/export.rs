//! `evi sessions export`: Markdown (default, to stdout), one self-contained
//! HTML file, or the whole tree as JSON. Streams entry by entry, so exporting
//! a huge session needs little memory. With `-o`, the file appears whole or
//! not at all (written beside the target, then renamed).

use std::io::{self, Write};
use std::path::PathBuf;

use base64::Engine as _;
use clap::{Args, ValueEnum};
use html_escape::encode_text as esc;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{fmt_rfc3339, fmt_second, load_tree, stdout};
use crate::fsutil::{persist_new, persist_replace, temp_beside};
use crate::message::{Message, without_encrypted};
use crate::source::Agent;
use crate::transcript::SessionTree;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Markdown: the active branch as a readable document.
    Md,
    /// One self-contained HTML page of the active branch.
    Html,
    /// The whole tree, every entry with its id and parent.
    Json,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "md")]
    pub format: Format,
    /// Write to this file instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn cmd_sessions_export(ctx: &Ctx, args: ExportArgs) -> CommandResult {
    let tree = load_tree(ctx, &args.id)?;
    let Some(path) = args.output else {
        let mut out = stdout();
        write_export(&tree, args.format, &mut out)?;
        return crate::commands::shared::finish(out);
    };
    if path.exists() && !args.force {
        return Err(already_exists(&path));
    }
    let mut tmp = temp_beside(&path)
        .map_err(|e| user_error(format!("cannot write beside {}: {e}", path.display())))?;
    {
        let mut w = io::BufWriter::new(tmp.as_file_mut());
        write_export(&tree, args.format, &mut w)?;
        w.flush()?;
    }
    let done = if args.force {
        persist_replace(tmp, &path)
    } else {
        persist_new(tmp, &path)
    };
    done.map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => already_exists(&path),
        _ => user_error(format!("cannot write {}: {e}", path.display())),
    })?;
    eprintln!("exported {} to {}", tree.id, path.display());
    Ok(())
}

fn already_exists(path: &std::path::Path) -> CommandError {
    user_error(format!("{} already exists", path.display()))
        .hinted("pass --force to replace it, or choose another path with -o")
}

fn write_export(tree: &SessionTree, format: Format, out: &mut impl Write) -> io::Result<()> {
    match format {
        Format::Md => markdown(tree, out),
        Format::Html => html(tree, out),
        Format::Json => json(tree, out),
    }
}

/// A fence longer than any run of backticks in `text`.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

fn heading(msg: &Message, ts: Option<i64>) -> String {
    let who = match (&msg.tool_name, msg.role.as_str()) {
        (Some(t), "tool") => format!("tool {t}"),
        (_, "invalid") => "invalid line".to_owned(),
        (_, r) => r.to_owned(),
    };
    match ts {
        Some(t) => format!("{who} · {}", fmt_second(t)),
        None => who,
    }
}

/// "Session ID", or "claude-code session ID" for another agent's.
fn name(tree: &SessionTree, session: &str) -> String {
    match tree.agent {
        Agent::Evi => format!("Session {session}"),
        a => format!("{} session {session}", a.name()),
    }
}

fn markdown(tree: &SessionTree, out: &mut impl Write) -> io::Result<()> {
    let active = tree.active_branch();
    let others = tree.other_branches(&active).len();
    writeln!(out, "# {}\n", name(tree, tree.id.as_str()))?;
    if let Some(title) = tree.latest_title()? {
        writeln!(out, "Title: {title}\n")?;
    }
    if let Some(project) = &tree.project {
        writeln!(out, "Project: `{project}`\n")?;
    }
    writeln!(
        out,
        "{} messages on the active branch, {} other branches.",
        active.len(),
        others
    )?;
    let mut fetch = tree.fetcher();
    for &i in &active {
        let msg = Message::of(tree.agent, &fetch.fetch(tree.entries[i].at)?);
        writeln!(out, "\n## {}\n", heading(&msg, tree.entries[i].ts))?;
        if let Some(r) = &msg.reasoning {
            writeln!(out, "> *Thinking:*")?;
            for l in r.lines() {
                writeln!(out, "> {l}")?;
            }
            writeln!(out)?;
        }
        if msg.fault.is_some() || msg.role == "tool" {
            let f = fence(&msg.text);
            writeln!(out, "{f}\n{}\n{f}", msg.text)?;
        } else if !msg.text.is_empty() {
            writeln!(out, "{}", msg.text)?;
        }
        for c in &msg.tool_calls {
            let f = fence(&c.arguments);
            writeln!(
                out,
                "\nTool call `{}`:\n\n{f}json\n{}\n{f}",
                c.name, c.arguments
            )?;
        }
    }
    Ok(())
}

const CSS: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em;color:#222}\
.m{border-left:3px solid #ccc;padding:.2em 1em;margin:1em 0}.user{border-color:#36c}.assistant{border-color:#3a3}\
.tool{border-color:#c83}.system{border-color:#999;color:#555}.thinking{color:#666;font-style:italic}.invalid{border-color:#c33;background:#fee}h2{font-size:.85em;color:#666;margin:.2em 0}\
pre{white-space:pre-wrap;word-wrap:break-word;margin:.3em 0}";

fn html(tree: &SessionTree, out: &mut impl Write) -> io::Result<()> {
    let active = tree.active_branch();
    let id = esc(tree.id.as_str());
    let heading_name = esc(&name(tree, tree.id.as_str())).into_owned();
    let project = match &tree.project {
        Some(p) => format!(
            "<p class=\"project\">Project: <code>{}</code></p>\n",
            esc(p)
        ),
        None => String::new(),
    };
    let title = match tree.latest_title()? {
        Some(t) => format!("<p class=\"title\">{}</p>\n", esc(&t)),
        None => String::new(),
    };
    writeln!(
        out,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Session {id}</title>\
         <style>{CSS}</style></head><body>\n<h1>{heading_name}</h1>\n{title}{project}<p>{} messages on the active branch, {} other branches.</p>",
        active.len(),
        tree.other_branches(&active).len()
    )?;
    let mut fetch = tree.fetcher();
    for &i in &active {
        let msg = Message::of(tree.agent, &fetch.fetch(tree.entries[i].at)?);
        let class = match msg.role.as_str() {
            r @ ("user" | "assistant" | "tool" | "system" | "invalid") => r,
            _ => "other",
        };
        writeln!(
            out,
            "<div class=\"m {class}\"><h2>{}</h2>",
            esc(&heading(&msg, tree.entries[i].ts)),
        )?;
        if let Some(r) = &msg.reasoning {
            writeln!(
                out,
                "<details class=\"thinking\"><summary>thinking</summary><pre>{}</pre></details>",
                esc(r)
            )?;
        }
        if !msg.text.is_empty() {
            writeln!(out, "<pre>{}</pre>", esc(&msg.text))?;
        }
        for c in &msg.tool_calls {
            writeln!(out, "<pre>→ {}({})</pre>", esc(&c.name), esc(&c.arguments))?;
        }
        writeln!(out, "</div>")?;
    }
    writeln!(out, "</body></html>")
}

/// The whole tree: every entry with id, parent, day, its line (as JSON
/// when it is JSON, else as base64 of its bytes) and the message it reads
/// as. Another agent's lines lose their encrypted reasoning (see
/// [`without_encrypted`]); every other byte of them is there.
fn json(tree: &SessionTree, out: &mut impl Write) -> io::Result<()> {
    let active = tree.active_branch();
    let mut on_active = vec![false; tree.entries.len()];
    for &i in &active {
        on_active[i] = true;
    }
    let leaf = active.last().map(|&i| tree.entries[i].id.as_str());
    write!(
        out,
        "{{\"session\":{},\"agent\":{},\"project\":{},\"title\":{},\"active_leaf\":{},\"entries\":[",
        serde_json::to_string(tree.id.as_str())?,
        serde_json::to_string(&tree.agent)?,
        serde_json::to_string(&tree.project)?,
        serde_json::to_string(&tree.latest_title()?)?,
        serde_json::to_string(&leaf)?
    )?;
    let mut fetch = tree.fetcher();
    for (n, e) in tree.entries.iter().enumerate() {
        let raw = fetch.fetch(e.at)?;
        let message = Message::of(tree.agent, &raw);
        let line = crate::transcript::line::original_bytes(&raw)
            .filter(|_| e.fault.is_some())
            .unwrap_or(raw);
        let mut value = match e.fault {
            None => serde_json::from_slice::<serde_json::Value>(&line).ok(),
            Some(_) => None,
        };
        if tree.agent != Agent::Evi
            && let Some(v) = &mut value
        {
            without_encrypted(v);
        }
        let entry = serde_json::json!({
            "id": e.id,
            "parentId": e.parent,
            "day": e.day,
            "ts": e.ts.and_then(fmt_rfc3339),
            "active": on_active[n],
            "line": value,
            "raw_base64": value.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(&line)),
            "fault": e.fault,
            "message": message,
        });
        if n > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"\n")?;
        serde_json::to_writer(&mut *out, &entry)?;
    }
    out.write_all(b"\n]}\n")
}
