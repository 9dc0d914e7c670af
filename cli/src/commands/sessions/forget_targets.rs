//! What `evi sessions forget` takes: the sessions its ids, `--agent` and
//! `--older-than` name, each as the streams that go (an eVi session is one
//! stream; a Claude Code session is its file and one stream per subagent
//! transcript beside it; a Codex rollout is one).

use std::time::SystemTime;

use crate::command_error::{CommandError, user_error};
use crate::commands::Ctx;
use crate::commands::shared::{agent_file, resolve};
use crate::source::{self, Agent, AgentFile, Source, StreamName};
use crate::transcript::Catalog;

/// One session to forget.
pub struct Target {
    /// As people name it: an eVi id, or `claude-code/<id>`, `codex/<id>`.
    pub name: String,
    pub agent: Agent,
    pub streams: Vec<StreamName>,
    pub files: u64,
    pub bytes: u64,
}

/// The source of `agent` here, when `[agents]` turns it on; else an error
/// saying how to.
pub fn enabled_source(ctx: &Ctx, agent: Agent) -> Result<Source, CommandError> {
    let on = source::is_enabled(agent, &ctx.config);
    match source::source(agent, &ctx.config) {
        Some(s) if on => Ok(s),
        _ => Err(user_error(format!(
            "{} sessions are not synced on this device, so none can be forgotten here",
            agent.name()
        ))
        .hinted(format!(
            "turn it on in the config: `[agents]` `{} = true` (then `evi sync push`)",
            agent.name()
        ))),
    }
}

/// An eVi session as a target.
pub fn evi_target(catalog: &Catalog, id: &evi_shared::SessionId) -> Target {
    let files = catalog.sessions.get(id).map(Vec::as_slice).unwrap_or(&[]);
    Target {
        name: id.to_string(),
        agent: Agent::Evi,
        streams: vec![StreamName::evi(id.clone())],
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.len).sum(),
    }
}

/// The session of another agent that `file` is (a subagent transcript
/// alone when it names one; else the session with its transcripts).
pub fn agent_target(all: &[AgentFile], file: &AgentFile) -> Target {
    let of_it: Vec<&AgentFile> = all
        .iter()
        .filter(|f| match &file.stream.sub {
            Some(_) => f.stream == file.stream,
            None => f.stream.agent == file.stream.agent && f.stream.session == file.stream.session,
        })
        .collect();
    // The session's own stream first: its forget takes every subagent
    // transcript beside it into its trash folder (and, on the server, their
    // records however many devices wrote them); each known one still gets
    // a tombstone of its own, for servers older than groups.
    let mut streams: Vec<StreamName> = of_it.iter().map(|f| f.stream.clone()).collect();
    streams.sort();
    Target {
        name: file.stream.to_string(),
        agent: file.stream.agent,
        streams,
        files: of_it.len() as u64,
        bytes: of_it
            .iter()
            .filter_map(|f| std::fs::metadata(&f.path).ok())
            .map(|m| m.len())
            .sum(),
    }
}

/// The session `prefix` names: among `agent`'s alone when given, else an
/// eVi session first and then another agent's turned on here.
pub fn by_id(
    ctx: &Ctx,
    catalog: &Catalog,
    agent: Option<Agent>,
    prefix: &str,
) -> Result<Target, CommandError> {
    match agent {
        None | Some(Agent::Evi) => {
            if agent.is_none()
                && catalog.matching(prefix).is_empty()
                && let Some(file) = agent_file(ctx, prefix)?
            {
                let all = source::enabled(&ctx.config)
                    .iter()
                    .filter(|s| s.agent == file.stream.agent)
                    .flat_map(Source::sessions)
                    .collect::<Vec<_>>();
                return Ok(agent_target(&all, &file));
            }
            let (id, _) = resolve(catalog, prefix)?;
            Ok(evi_target(catalog, &id))
        }
        Some(a) => {
            let src = enabled_source(ctx, a)?;
            let all = src.sessions();
            let mut found = source::matching(std::slice::from_ref(&src), prefix);
            match found.len() {
                1 => Ok(agent_target(&all, &found.remove(0))),
                0 => Err(
                    user_error(format!("no {} session matches `{prefix}`", a.name())).hinted(
                        format!(
                            "`evi sessions list --agent {} --days 3650` shows their ids",
                            a.name()
                        ),
                    ),
                ),
                n => {
                    let mut msg = format!("`{prefix}` matches {n} {} sessions:", a.name());
                    for f in found.iter().take(20) {
                        msg.push_str(&format!("\n  {}", f.stream));
                    }
                    Err(user_error(msg).hinted("type more characters of the id"))
                }
            }
        }
    }
}

/// Sessions of `agent` last written before `cutoff` (a Claude Code
/// session by the newest of its file and its subagents' transcripts).
pub fn older_than(
    ctx: &Ctx,
    catalog: &Catalog,
    agent: Agent,
    cutoff: SystemTime,
) -> Result<Vec<Target>, CommandError> {
    if agent == Agent::Evi {
        return Ok(catalog
            .sessions
            .iter()
            .filter(|(_, files)| {
                files
                    .iter()
                    .map(|f| f.mtime)
                    .max()
                    .is_some_and(|t| t < cutoff)
            })
            .map(|(id, _)| evi_target(catalog, id))
            .collect());
    }
    let all = enabled_source(ctx, agent)?.sessions();
    let mut newest: std::collections::BTreeMap<&evi_shared::SessionId, SystemTime> =
        std::collections::BTreeMap::new();
    for f in &all {
        let t = std::fs::metadata(&f.path)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let e = newest
            .entry(&f.stream.session)
            .or_insert(SystemTime::UNIX_EPOCH);
        *e = (*e).max(t);
    }
    Ok(all
        .iter()
        .filter(|f| f.stream.sub.is_none())
        .filter(|f| newest.get(&f.stream.session).is_some_and(|t| *t < cutoff))
        .map(|f| agent_target(&all, f))
        .collect())
}

/// The streams an undo of `id` brings back: those in this device's trash
/// that it names (an eVi session id; `claude-code/<id>` or `codex/<id>`,
/// or the id with `--agent`; a Claude Code session with its subagents'
/// transcripts, those in its trash folder and those forgotten by
/// tombstones of their own).
pub fn in_trash(
    ctx: &Ctx,
    agent: Option<Agent>,
    id: &str,
) -> Result<(String, Vec<StreamName>), CommandError> {
    let named = match agent {
        Some(a) if a != Agent::Evi && !id.contains('/') => format!("{}/{id}", a.name()),
        _ => id.to_owned(),
    };
    let stream = StreamName::parse(&named)
        .ok_or_else(|| user_error(format!("`{id}` is not a session id")))?;
    let held = crate::sync::engine::forget::trash::streams(&ctx.home)
        .map_err(|e| user_error(format!("cannot read sync/trash/: {e}")))?;
    let mut out: Vec<StreamName> = held
        .into_iter()
        .filter(|s| {
            *s == stream
                || (stream.sub.is_none()
                    && stream.agent != Agent::Evi
                    && s.agent == stream.agent
                    && s.session == stream.session)
        })
        .collect();
    if out.is_empty() && agent.is_none() && stream.agent == Agent::Evi {
        // An id alone may be another agent's session.
        out = crate::sync::engine::forget::trash::streams(&ctx.home)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s.agent != Agent::Evi && s.session == stream.session)
            .collect();
    }
    // Subagent transcripts of the session forgotten by tombstones of their
    // own (an older evi sent one each): each needs its undo, wherever its
    // file is in the trash.
    if let Some(session) = out
        .iter()
        .find(|s| s.sub.is_none() && s.agent != Agent::Evi)
    {
        let ledger = crate::sync::engine::forget::Ledger::load(&ctx.home.sync_dir())
            .map_err(|e| user_error(format!("cannot read sync/forget.json: {e}")))?;
        let subs: Vec<StreamName> = (ledger.sessions.keys())
            .filter(|s| ledger.is_forgotten_alone(s))
            .filter_map(|s| StreamName::parse(s))
            .filter(|s| session.covers(s) && s.sub.is_some())
            .collect();
        out.extend(subs);
    }
    out.sort();
    out.dedup();
    Ok((named, out))
}
