//! Failed logins in the database, so their limits hold across replicas.

use async_trait::async_trait;

use super::*;
use crate::ratelimit::{FailureCounts, FailureLog};

/// The `login_failures` table: one row per failure; rows past the window
/// go as new failures are written.
pub struct PgFailures {
    store: PgStore,
}

impl PgFailures {
    pub fn new(store: PgStore) -> Self {
        Self { store }
    }
}

#[async_trait]
impl FailureLog for PgFailures {
    async fn recent(&self, user: &str, address: &str, since_ms: i64) -> StoreResult<FailureCounts> {
        let c = self.store.client().await?;
        let r = c
            .query_one(
                "SELECT COUNT(*), MIN(at_ms),
                        COUNT(*) FILTER (WHERE address = $2),
                        MIN(at_ms) FILTER (WHERE address = $2)
                 FROM login_failures WHERE user_name = $1 AND at_ms >= $3",
                &[&user, &address, &since_ms],
            )
            .await?;
        Ok(FailureCounts {
            user: r.get::<_, i64>(0) as u64,
            user_oldest_ms: r.get(1),
            at_address: r.get::<_, i64>(2) as u64,
            at_address_oldest_ms: r.get(3),
        })
    }

    async fn record(
        &self,
        user: &str,
        address: &str,
        now_ms: i64,
        prune_before_ms: i64,
    ) -> StoreResult<()> {
        let c = self.store.client().await?;
        c.execute(
            "INSERT INTO login_failures (user_name, address, at_ms) VALUES ($1, $2, $3)",
            &[&user, &address, &now_ms],
        )
        .await?;
        c.execute(
            "DELETE FROM login_failures WHERE at_ms < $1",
            &[&prune_before_ms],
        )
        .await?;
        Ok(())
    }
}
