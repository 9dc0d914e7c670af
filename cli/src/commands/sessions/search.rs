//! `evi sessions search`: full-text search over every session on this
//! device, eVi's and those of the agents `[agents]` turns on, through the
//! local index (`crate::search`), which it first brings up to date.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::{Args, ValueEnum};
use evi_shared::SessionId;
use serde::Serialize;

use super::Ctx;
use crate::command_error::{CommandResult, usage_error, user_error};
use crate::commands::shared::{finish, fmt_minute, fmt_rfc3339, scan, stdout};
use crate::search::agents::hit_session;
use crate::search::find::{Filter, Hit, since_day};
use crate::search::query::Query;
use crate::search::snippet::{Marks, Part, render, snippet};
use crate::search::{index_path, with_index};
use crate::source::Agent;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words and "quoted phrases" (quote them for the shell too:
    /// '"auth middleware"'); every one must match. The arguments are
    /// joined with spaces.
    #[arg(required = true, value_name = "QUERY")]
    pub query: Vec<String>,
    /// Only lines of this role.
    #[arg(long, value_enum)]
    pub role: Option<RoleArg>,
    /// Only lines in the day files of the last N days (today counts as one;
    /// another agent's lines by their time).
    #[arg(long, value_name = "N")]
    pub days: Option<u32>,
    /// At most this many hits.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Only sessions of this agent: evi, claude-code, codex, gemini or opencode (those of
    /// other agents are searched when `[agents]` turns them on).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    User,
    Assistant,
    Tool,
    System,
}

impl RoleArg {
    fn name(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
            Self::System => "system",
        }
    }
}

/// At most this many hits, whatever `--limit` asks: each costs a read of
/// its line.
const MAX_LIMIT: usize = 1000;

/// How long a search waits for another evi that is updating the index.
const WAIT: Duration = Duration::from_secs(30);

/// One hit as `--json` prints it.
#[derive(Debug, Serialize)]
struct HitView {
    /// The session's id as `evi sessions list --json` gives it (a Claude
    /// Code subagent transcript: its stream name).
    session: String,
    short_id: String,
    agent: Agent,
    entry: String,
    role: String,
    ts: Option<String>,
    day: String,
    /// Relevance (bm25, higher is better); hits come sorted by it, then by
    /// time, newest first.
    score: f64,
    snippet: Vec<Part>,
}

#[derive(Debug, Serialize)]
struct Results<'a> {
    query: &'a str,
    hits: Vec<HitView>,
}

pub fn cmd_sessions_search(ctx: &Ctx, args: SearchArgs) -> CommandResult {
    if args.limit == 0 || args.limit > MAX_LIMIT {
        return Err(usage_error(format!(
            "--limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let agent = match args.agent.as_deref() {
        None => None,
        Some(name) => Some(Agent::from_name(name).ok_or_else(|| {
            usage_error(format!("unknown agent `{name}`"))
                .hinted(format!("use --agent {}", Agent::names_in_words()))
        })?),
    };
    let text = args.query.join(" ");
    let query = Query::parse(&text).map_err(|e| {
        usage_error(e).hinted("search for words and \"quoted phrases\"; every one must match")
    })?;
    let catalog = scan(ctx)?;
    let since = args.days.map(since_day);
    let filter = Filter {
        role: args.role.map(RoleArg::name),
        since_day: since.as_deref(),
        agent,
        limit: args.limit,
    };
    let mut views = Vec::new();
    // Reading creates nothing in a home that is not there.
    if ctx.home.absent().is_none() {
        let agents = crate::search::agents::enabled(&ctx.config, &ctx.home);
        let found = with_index(&ctx.home, WAIT, |ix| {
            ix.search(&catalog, &agents, &query, &filter)
        })
        .map_err(|e| {
            user_error(e).hinted(format!(
                "the index is a cache: removing {} makes the next search rebuild it",
                index_path(&ctx.home).display()
            ))
        })?;
        for f in found {
            views.push(view(&catalog, f.hit, &f.text, &query));
        }
    }
    let mut out = stdout();
    if args.json {
        let results = Results {
            query: &text,
            hits: views,
        };
        serde_json::to_writer_pretty(&mut out, &results).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    let marks = if std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    {
        Marks::Ansi
    } else {
        Marks::Plain
    };
    // The agent's column only where another agent's session is in the
    // hits, as `sessions list` does.
    let agents = views.iter().any(|v| v.agent != Agent::Evi);
    for v in &views {
        if agents {
            write!(out, "{:11}  ", v.agent.name())?;
        }
        let when =
            v.ts.as_deref()
                .and_then(crate::transcript::line::parse_ts)
                .map(fmt_minute)
                .unwrap_or_else(|| v.day.clone());
        writeln!(
            out,
            "{}  {}  {:9}  {when}",
            v.short_id,
            &v.entry[..v.entry.len().min(12)],
            v.role
        )?;
        writeln!(out, "    {}", render(&v.snippet, marks))?;
    }
    finish(out)?;
    if views.is_empty() {
        eprintln!("no matches for {text}");
        if let Some(a) = agent.filter(|a| !crate::source::is_enabled(*a, &ctx.config)) {
            eprintln!(
                "{} sessions are not searched here: turn them on with `[agents] {} = true` in {}",
                a.name(),
                a.name(),
                ctx.home.config_file().display()
            );
        }
    } else if std::io::stderr().is_terminal() {
        eprintln!("open a hit in context: evi sessions show SESSION --through ENTRY");
    }
    Ok(())
}

fn view(catalog: &crate::transcript::Catalog, h: Hit, text: &str, q: &Query) -> HitView {
    let named = hit_session(&h.session);
    let short_id = named.short_id.unwrap_or_else(|| {
        h.session
            .parse::<SessionId>()
            .map(|id| catalog.short_id(&id))
            .unwrap_or_else(|_| h.session.clone())
    });
    HitView {
        snippet: snippet(text, q.all_tokens()),
        short_id,
        agent: named.agent,
        ts: h.ts.and_then(fmt_rfc3339),
        session: named.id,
        entry: h.entry,
        role: h.role,
        day: h.day,
        score: h.score,
    }
}
