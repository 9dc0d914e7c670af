//! `evi sessions list`: newest sessions first, one line each.

use std::io::Write;

use chrono::{Days, Local};
use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::command_error::{CommandResult, usage_error, user_error};
use crate::commands::shared::{finish, fmt_minute, scan, stdout, width};
use crate::message::one_line;
use crate::source::Agent;
use crate::transcript::SessionTree;
use crate::transcript::summary::SessionSummary;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only sessions active in the last N days (today counts as one).
    #[arg(long, default_value_t = 7)]
    pub days: u32,
    /// At most this many sessions.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Only this agent's sessions: evi, claude-code, codex, gemini or opencode (those of other
    /// agents are listed when `[agents]` turns them on).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
}

pub fn cmd_sessions_list(ctx: &Ctx, args: ListArgs) -> CommandResult {
    if args.limit == 0 {
        return Err(usage_error("--limit must be at least 1"));
    }
    let only = args
        .agent
        .as_deref()
        .map(crate::commands::shared::agent_arg)
        .transpose()?;
    let catalog = scan(ctx)?;
    let today = Local::now().date_naive();
    let first_day = today
        .checked_sub_days(Days::new(u64::from(args.days.max(1)) - 1))
        .unwrap_or(today)
        .format("%Y-%m-%d")
        .to_string();
    let recent: Vec<_> = catalog
        .by_recency()
        .into_iter()
        .filter(|_| only.is_none_or(|a| a == Agent::Evi))
        .filter(|(_, files)| {
            files
                .last()
                .is_some_and(|f| f.day.as_str() >= first_day.as_str())
        })
        .take(args.limit)
        .collect();

    let mut rows = Vec::with_capacity(recent.len());
    for (id, files) in recent {
        let tree = SessionTree::load(id.clone(), files.to_vec())
            .map_err(|e| user_error(format!("cannot read session {id}: {e}")))?;
        rows.push(SessionSummary::of(&tree, catalog.short_id(id))?);
    }
    // Other agents' sessions, newest first among all by their last time.
    let mut others = Vec::new();
    // Another agent's times are UTC and `first_day` is local (as eVi's day
    // folders are): its last message's local day is what counts. Its UTC
    // date is a day behind east of UTC after local midnight, which hid a
    // session of this morning from `--days 1` there.
    let in_days = |s: &SessionSummary| {
        let end = s.end.as_deref().and_then(crate::transcript::line::parse_ts);
        end.is_some_and(|ms| crate::search::find::local_day(ms) >= first_day)
    };
    let agent = only.filter(|a| *a != Agent::Evi);
    if only.is_none_or(|a| a != Agent::Evi) {
        for (file, summary) in
            crate::source::summary::recent(&ctx.config, &ctx.home, agent, args.limit, in_days)
        {
            let s = summary.map_err(|e| {
                user_error(format!("cannot read session {}: {e}", file.path.display()))
            })?;
            others.push(s);
        }
    }
    if !others.is_empty() {
        rows.extend(others);
        rows.sort_by(|a, b| b.end.cmp(&a.end));
        rows.truncate(args.limit);
    }

    let mut out = stdout();
    if args.json {
        #[derive(Serialize)]
        struct Listing<'a> {
            sessions: &'a [SessionSummary],
        }
        serde_json::to_writer_pretty(&mut out, &Listing { sessions: &rows })
            .map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else if !rows.is_empty() {
        print_table(&mut out, &rows)?;
    }
    if rows.is_empty() && only.is_none_or(|a| a == Agent::Evi) {
        explain_empty(ctx, catalog.sessions.len(), args.days);
    }
    finish(out)
}

fn print_table(out: &mut impl Write, rows: &[SessionSummary]) -> std::io::Result<()> {
    let idw = rows
        .iter()
        .map(|r| r.short_id.len())
        .max()
        .unwrap_or(8)
        .max(2);
    let when = |t: &Option<String>| {
        t.as_deref()
            .and_then(crate::transcript::line::parse_ts)
            .map(fmt_minute)
            .unwrap_or_else(|| "-".into())
    };
    // A titled session shows its title where the others show their first
    // message.
    // The agent's column only where another agent's session is listed: a
    // home of eVi's sessions alone reads as it always did.
    let agents = rows.iter().any(|r| r.agent != Agent::Evi);
    let agent = |r: &SessionSummary| {
        if agents {
            format!("{:11}  ", r.agent.name())
        } else {
            String::new()
        }
    };
    let last = if rows.iter().any(|r| r.title.is_some()) {
        "TITLE / FIRST MESSAGE"
    } else {
        "FIRST MESSAGE"
    };
    let head = if agents {
        format!("{:11}  ", "AGENT")
    } else {
        String::new()
    };
    writeln!(
        out,
        "{head}{:idw$}  {:16}  {:16}  {:>5}  {:>3}  {last}",
        "ID", "START", "END", "MSGS", "BR"
    )?;
    let fixed = head.len() + idw + 2 + 16 + 2 + 16 + 2 + 5 + 2 + 3 + 2;
    let room = width().saturating_sub(fixed).max(10);
    for r in rows {
        let first = r
            .title
            .as_deref()
            .or(r.first_message.as_deref())
            .unwrap_or("(no user message)");
        writeln!(
            out,
            "{}{:idw$}  {:16}  {:16}  {:>5}  {:>3}  {}",
            agent(r),
            r.short_id,
            when(&r.start),
            when(&r.end),
            r.messages,
            r.branches,
            one_line(first, room)
        )?;
    }
    Ok(())
}

/// Says on stderr why there is nothing to list.
fn explain_empty(ctx: &Ctx, total: usize, days: u32) {
    let dir = ctx.home.transcripts_dir();
    let msg = if ctx.home.absent().is_some() {
        return; // `scan` said there is no home
    } else if !dir.is_dir() && !ctx.config.tools.transcripts {
        format!(
            "no sessions: transcripts are turned off (`[tools] transcripts = false` in {})",
            ctx.home.config_file().display()
        )
    } else if !dir.is_dir() {
        format!(
            "no sessions: {} does not exist (eVi has written no transcript in this home yet)",
            dir.display()
        )
    } else if total == 0 && !ctx.config.tools.transcripts {
        format!(
            "no sessions: transcripts are turned off (`[tools] transcripts = false` in {})",
            ctx.home.config_file().display()
        )
    } else if total == 0 {
        format!("no sessions in {}", dir.display())
    } else {
        format!("no sessions active in the last {days} days ({total} older; try --days 3650)")
    };
    eprintln!("{msg}");
}
