//! What commands that sync share: opening the home's sync context, and a
//! sync, client or git failure as the user reads it, with what to do.

use evi_shared::api::ErrorCode;

use crate::command_error::{CommandError, usage_error, user_error};
use crate::commands::Ctx;
use crate::git::{self, GitError};
use crate::sync::error::SyncError;
use crate::sync::remote::client::{Cause, ClientError, is_unauthorized};
use crate::sync::state::SyncState;
use crate::sync::state::context::SyncContext;

/// The two commands that bring the account's key to a device, the one
/// text every hint about pairing uses: `evi sync pair` on `pair_on`, then
/// `evi sync join CODE --server {server}` on `join_on` ("on your first
/// device", "here", "there"). `server` is the URL the joining device names:
/// the account's when it is known, else the placeholder `URL`.
pub fn pairing_steps(pair_on: &str, join_on: &str, server: &str) -> String {
    format!("`evi sync pair` {pair_on}, `evi sync join CODE --server {server}` {join_on}")
}

/// [`pairing_steps`] onto this device, with the offline path (the key
/// file carried by hand) and what is left to do after its import (`then`,
/// from its leading comma; empty when nothing is).
pub fn pair_here(pair_on: &str, server: &str, then: &str) -> String {
    format!(
        "{} (offline: `evi sync key export -o key.age` there, `evi sync key import key.age` \
         here{then})",
        pairing_steps(pair_on, "here", server)
    )
}

/// Opens the home's sync context (taking the lock).
pub fn open_sync(ctx: &Ctx) -> Result<SyncContext, CommandError> {
    tell_notices();
    SyncContext::open(&ctx.home).map_err(sync_error)
}

/// The engine's notices (waits, retries) go to stderr, one line each.
pub fn tell_notices() {
    crate::sync::notice::set_sink(|msg| eprintln!("{msg}"));
}

/// A sync failure as the user reads it, with what to do.
pub fn sync_error(e: SyncError) -> CommandError {
    if let SyncError::Client(c) = &e
        && let Some(err) = client_failure(c)
    {
        return err;
    }
    let hint: Option<std::borrow::Cow<'static, str>> = match &e {
        SyncError::NotSetUp { .. } => Some(
            "run `evi sync init --server URL --user NAME` on your first device, \
             or `evi sync login --server URL --user NAME` on another"
                .into(),
        ),
        SyncError::Client(c) if is_unauthorized(c) => Some(
            "this device's token is no longer valid (revoked?): run `evi sync login` again".into(),
        ),
        SyncError::Client(c)
            if matches!(
                c.code(),
                Some(ErrorCode::KeyProofRequired | ErrorCode::KeyProofMismatch)
            ) =>
        {
            Some(
                "the server holds another proof of the account's key than this device's key \
                 makes (set by someone holding a device token but not the key, or by a device \
                 with another key): run `evi sync login` with the account's password to put \
                 this key's proof in its place, then run the command again"
                    .into(),
            )
        }
        SyncError::KeyMismatch => Some(
            format!(
                "move sync/identity.txt (in the eVi home) away, then pair this device: {}",
                pair_here("on your first device", "URL", "")
            )
            .into(),
        ),
        SyncError::Identity(crate::sync::IdentityError::Malformed(_)) => {
            Some("import your key backup: evi sync key import FILE".into())
        }
        SyncError::Segment { .. } | SyncError::Blob { .. } => Some(
            "nothing from that record was written; the server may be compromised or its data \
             damaged"
                .into(),
        ),
        SyncError::Lock(_) => Some("set EVI_SYNC_LOCK_WAIT=SECONDS to wait longer".into()),
        SyncError::Config(_) => Some(
            "fix `[sync]` in config.toml (in the eVi home); docs/redaction.md lists the rules"
                .into(),
        ),
        _ => None,
    };
    let err = user_error(e);
    match hint {
        Some(h) => err.hinted(h),
        None => err,
    }
}

/// [`sync_error`] of a command that writes into `ctx`'s home: a full disk
/// there is named, with what became of the work.
pub fn sync_error_in(ctx: &Ctx, e: SyncError) -> CommandError {
    if let SyncError::Io { source, .. } = &e
        && crate::fsutil::is_disk_full(source)
    {
        return user_error(&e).hinted(format!(
            "the disk holding {} is full: make room on it and run the command again; \
             nothing is half-written, and it goes on from where it stopped",
            ctx.home.root().display()
        ));
    }
    sync_error(e)
}

/// What the client says about the URL, the network, the credentials and
/// the server, when it is more than the error's text.
fn client_failure(c: &ClientError) -> Option<CommandError> {
    const EXAMPLE: &str = "for example --server http://127.0.0.1:8787";
    let err = match c {
        ClientError::UrlScheme { url } if !url.contains("://") => {
            usage_error(c).hinted(format!("for example --server http://{url}"))
        }
        ClientError::UrlScheme { .. } | ClientError::BadUrl { .. } => {
            usage_error(c).hinted(EXAMPLE)
        }
        ClientError::Api {
            code: ErrorCode::InvalidCredentials,
            ..
        } => user_error("wrong user name or password").hinted(
            "check the user name (--user) and the password \
             (EVI_SYNC_PASSWORD, --password-stdin or the prompt)",
        ),
        ClientError::Api {
            code: ErrorCode::RateLimited,
            retry_after,
            ..
        } => {
            user_error("rate limited by the server (too many attempts)").hinted(match retry_after {
                Some(s) => format!("try again in {s} s"),
                None => "try again in a minute".to_owned(),
            })
        }
        ClientError::Api {
            code: ErrorCode::StorageFull,
            ..
        } => user_error("the server is out of disk space: nothing of this request was stored")
            .hinted(
                "whoever runs evi-server must make room on the disk of its data folder; \
                 then run the command again: it sends only what the server does not have",
            ),
        ClientError::Api {
            code: ErrorCode::KeyRotated,
            message,
            ..
        } => user_error(message).hinted(format!(
            "this device must be paired again: run {} (nothing local is lost: what this device \
             has not pushed goes up after it joins)",
            pairing_steps("on a device that has the new key", "here", "URL")
        )),
        ClientError::Api {
            code: ErrorCode::MisdirectedRequest,
            ..
        } => user_error(c).hinted(
            "the server answers only at the URL it names (its --public-url): pass that URL \
             with --server; behind a reverse proxy, the proxy must pass the Host header on",
        ),
        ClientError::Api {
            code: ErrorCode::UnsupportedMediaType,
            ..
        } => user_error(c).hinted(
            "something between this device and the server changed the request's \
             Content-Type (a proxy?), or the server is newer than this evi",
        ),
        ClientError::Transport { url, cause, .. } => {
            let hint = match cause {
                Cause::Refused => "start evi-server, or check the host and port \
                                   (evi-server prints the address it listens on)"
                    .to_owned(),
                Cause::Tls(_) if cause.is_plain_http() => format!(
                    "the server does not speak TLS there: try {}",
                    url.replacen("https://", "http://", 1)
                ),
                Cause::Tls(_) => "check the server's TLS certificate \
                                  (is it trusted on this machine?)"
                    .to_owned(),
                Cause::Timeout => "check the host and port, and that no firewall is in the \
                                   way; a busy server may also answer late"
                    .to_owned(),
                Cause::UnknownHost(_) => "check the host name in the server URL".to_owned(),
                Cause::Other(_) => {
                    "check that evi-server is running and the URL is right".to_owned()
                }
            };
            user_error(c).hinted(hint)
        }
        ClientError::Cut { .. } | ClientError::BadFrames { .. } if c.is_transient() => {
            user_error(c).hinted(
                "the connection keeps failing while answers arrive (the network, or a proxy \
                 in between): check it and run the command again; nothing is half-done",
            )
        }
        ClientError::NotEviServer { root, .. } => user_error(c).hinted(match root {
            Some(root) => format!("evi-server answers at {root}: use that as the server URL"),
            None => format!("the server URL is where evi-server listens, with no path ({EXAMPLE})"),
        }),
        _ => return None,
    };
    Some(err)
}

/// A client failure as the user reads it (see [`sync_error`]).
pub fn client_error(e: ClientError) -> CommandError {
    sync_error(SyncError::Client(e))
}

/// Whether this home is set up for sync.
pub fn sync_set_up(ctx: &Ctx) -> bool {
    SyncState::is_set_up(&ctx.home)
}

/// Errors unless this home is set up for sync.
pub fn require_sync(ctx: &Ctx, what: &str) -> Result<(), CommandError> {
    if !sync_set_up(ctx) {
        return Err(user_error(format!(
            "{what} needs sync, and this eVi home is not set up for it"
        ))
        .hinted(
            "run `evi sync init --server URL --user NAME` (first device) or \
             `evi sync login --server URL --user NAME` (another device), then try again",
        ));
    }
    Ok(())
}

/// A git failure as the command line says it, with what to do.
pub fn git_error(e: GitError) -> CommandError {
    let hint = match &e {
        GitError::Missing(_) | GitError::TooOld(_) => Some(format!(
            "install git {}.{} or later (https://git-scm.com), or hand off with --no-git \
             (the conversation alone)",
            git::MIN_GIT.0,
            git::MIN_GIT.1
        )),
        GitError::TooLarge { .. } => Some(
            "commit and push the large changes (or --push-branch), keep large files out \
             with .gitignore, or hand off with --no-git (the conversation alone)"
                .into(),
        ),
        GitError::NotACheckout(_) => {
            Some("pass --repo PATH to name the checkout, or --no-git".into())
        }
        GitError::Busy { .. } => Some(
            "commit or stash them yourself, or pass --worktree PATH for a new git worktree \
             at the handoff's state (this checkout stays as it is)"
                .into(),
        ),
        _ => None,
    };
    let err = user_error(e);
    match hint {
        Some(h) => err.hinted(h),
        None => err,
    }
}
