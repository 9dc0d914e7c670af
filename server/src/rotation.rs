//! Deleting what a key rotation retired: the old account's blobs and body
//! packs (files, or objects), then its rows. Run right after a commit and
//! at every start, so a crash in between only delays it; every step may
//! run again (a file already gone is not an error). And ending rotations
//! left unfinished past `--rotation-ttl-secs` ([`expire`]).

use std::time::Duration;

use crate::AppState;

/// Abandons every rotation begun more than [`crate::config::Config::rotation_ttl`]
/// ago (a device that began one and never came back, or a stolen token's),
/// then purges what they staged; logs, never fails (the next round tries
/// again).
pub async fn expire(state: &AppState) {
    let ttl = state.config.rotation_ttl;
    let now = chrono::Utc::now().timestamp();
    let before = now.saturating_sub(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    match state.store.expire_rotations(before, now).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(
                rotations = n,
                ttl_secs = ttl.as_secs(),
                "abandoned key rotations left unfinished past --rotation-ttl-secs"
            );
            purge(state).await;
        }
        Err(e) => tracing::warn!(error = %e, "could not end unfinished key rotations"),
    }
}

/// How often [`expire`] runs: a quarter of the time a rotation may take,
/// between a second and an hour.
pub fn expire_every(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Purges every retired account (a rotation's old or abandoned staging
/// account, or one `evi-server admin delete` retired); logs, never fails
/// (the next start tries again).
pub async fn purge(state: &AppState) {
    let users = match state.store.retired_users().await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "could not list the retired accounts to purge");
            return;
        }
    };
    if users.is_empty() {
        return;
    }
    let packs = match state.bodies.list_packs().await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "could not list body packs to purge a retired account");
            return;
        }
    };
    for user in users {
        if let Err(e) = purge_one(state, user, &packs).await {
            tracing::warn!(user, error = %e, "could not purge a retired account");
        }
    }
}

async fn purge_one(
    state: &AppState,
    user: crate::store::UserId,
    packs: &[(crate::store::UserId, crate::bodies::PackName)],
) -> anyhow::Result<()> {
    for name in state.store.retired_blobs(user).await? {
        state.blobs.remove(user, &name).await?;
    }
    for (_, pack) in packs.iter().filter(|(u, _)| *u == user) {
        state.bodies.remove_pack(user, pack).await?;
    }
    state.store.drop_retired(user).await?;
    tracing::info!(user, "purged the data of a retired account");
    Ok(())
}
