//! The session a command names: the transcripts scanned (warnings
//! printed), an id or unambiguous prefix resolved, another agent's session
//! found, and how its paths map here.

use evi_shared::SessionId;

use crate::command_error::{CommandError, usage_error, user_error};
use crate::commands::Ctx;
use crate::commands::shared::warn;
use crate::source::paths::PathMap;
use crate::source::{self, AgentFile};
use crate::transcript::{Catalog, SessionFile, SessionTree};

/// The agent `--agent NAME` names (a misuse when none).
pub fn agent_arg(name: &str) -> Result<source::Agent, CommandError> {
    source::Agent::from_name(name).ok_or_else(|| {
        usage_error(format!(
            "--agent {name:?} is not an agent: use {}",
            source::Agent::names_in_words()
        ))
    })
}

/// Scans the transcripts folder, printing a warning per skipped path (and
/// one when the home itself does not exist: reading creates nothing).
pub fn scan(ctx: &Ctx) -> Result<Catalog, CommandError> {
    if let Some(why) = ctx.home.absent() {
        warn(&format!(
            "there is no eVi home at {} ({why})",
            ctx.home.root().display()
        ));
    }
    let dir = ctx.home.transcripts_dir();
    let catalog = Catalog::scan(&dir)
        .map_err(|e| user_error(format!("cannot read {}: {e}", dir.display())))?;
    for w in &catalog.warnings {
        warn(w);
    }
    Ok(catalog)
}

/// The session an id or unambiguous prefix names.
pub fn resolve(
    catalog: &Catalog,
    prefix: &str,
) -> Result<(SessionId, Vec<SessionFile>), CommandError> {
    match catalog.matching(prefix).as_slice() {
        [id] => Ok(((*id).clone(), catalog.sessions[*id].clone())),
        [] => Err(user_error(format!("no session matches `{prefix}`"))
            .hinted("`evi sessions list --days 3650` shows the ids of every session")),
        many => {
            let mut msg = format!("`{prefix}` matches {} sessions:", many.len());
            for id in many.iter().take(20) {
                msg.push_str(&format!("\n  {id}"));
            }
            Err(user_error(msg).hinted("type more characters of the id"))
        }
    }
}

/// Loads the tree of the session `prefix` names.
pub fn load_tree(ctx: &Ctx, prefix: &str) -> Result<SessionTree, CommandError> {
    load(ctx, prefix).map(|(tree, _)| tree)
}

/// Loads the tree of the session `prefix` names (an eVi session's first,
/// else another agent's turned on here), with its shortest unambiguous id.
pub fn load(ctx: &Ctx, prefix: &str) -> Result<(SessionTree, String), CommandError> {
    let catalog = scan(ctx)?;
    if catalog.matching(prefix).is_empty()
        && let Some(file) = agent_file(ctx, prefix)?
    {
        let tree = SessionTree::load_agent(&file, &path_map(ctx, &file.stream))
            .map_err(|e| user_error(format!("cannot read {}: {e}", file.path.display())))?;
        let short = file.stream.session.as_str().chars().take(8).collect();
        return Ok((tree, short));
    }
    let (id, files) = resolve(&catalog, prefix)?;
    let tree = SessionTree::load(id.clone(), files)
        .map_err(|e| user_error(format!("cannot read session {id}: {e}")))?;
    let short = catalog.short_id(&id);
    Ok((tree, short))
}

/// How `stream`'s paths map here: `[paths]`, and the pair its project was
/// placed by when pull found it by its git remote.
pub fn path_map(ctx: &Ctx, stream: &source::StreamName) -> PathMap {
    let base = PathMap::new(&ctx.config.paths.map);
    source::project::Projects::load(&ctx.home.sync_dir())
        .map_for(&base, stream)
        .into_owned()
}

/// The session of another agent turned on here that `prefix` names: an id
/// or prefix of a session, or a stream name (`claude-code/<id>`, a subagent
/// transcript `claude-code/<id>/<stem>`, `codex/<id>`). `None` when none
/// does; more than one is an error, as for eVi's.
pub fn agent_file(ctx: &Ctx, prefix: &str) -> Result<Option<AgentFile>, CommandError> {
    let mut found = source::matching(&source::enabled(&ctx.config), prefix);
    match found.len() {
        0 | 1 => Ok(found.pop()),
        n => {
            let mut msg = format!("`{prefix}` matches {n} sessions of other agents:");
            for f in found.iter().take(20) {
                msg.push_str(&format!("\n  {} ({})", f.stream, f.path.display()));
            }
            Err(user_error(msg).hinted("type more characters of the id"))
        }
    }
}
