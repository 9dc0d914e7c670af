//! The cross-replica wake-up: one `LISTEN` connection per replica.
//!
//! Every transaction that ends or changes a wait of a user (records or
//! forgets pushed, a device revoked, a password changed, a key rotation
//! committed) sends `NOTIFY` on [`CHANNEL`] with the user id alone. The
//! schema's triggers send it (migration 7, `0007_change_notices.sql`: on
//! the account's `newest_seq`, key generation and retirement, and on its
//! devices deleted or moved), so no code path can commit such a change
//! unannounced; Postgres delivers it at commit and never for a rollback,
//! and folds notices of one transaction with one payload into one. This
//! task wakes that user's waits here, which then read the store (their
//! cursor, their token) as a local commit would have them do.
//!
//! A notice can be lost only while the connection is down. So after any
//! reconnect every parked wait is woken ([`Waiters::wake_all`]) and re-checks
//! its cursor: a commit made meanwhile is answered late, never missed. A
//! connection that dies silently is found by a `SELECT 1` every
//! [`PROBE_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use super::{CHANNEL, PgStore};
use crate::waiters::Waiters;

/// How often the idle listener checks its connection.
const PROBE_EVERY: Duration = Duration::from_secs(10);
/// First and longest pause between reconnect attempts.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Starts the listener; it runs until the process ends.
pub fn spawn(store: &PgStore, waiters: Arc<Waiters>) -> tokio::task::JoinHandle<()> {
    let (config, tls) = store.connect_parts();
    let target = store.target().to_owned();
    tokio::spawn(async move {
        let mut pause = RETRY_FIRST;
        let mut lost = false;
        loop {
            match listen_once(&config, tls.clone(), &waiters, lost).await {
                Ok(()) => pause = RETRY_FIRST,
                Err(e) => {
                    tracing::warn!(database = %target, error = %e,
                        "the database listener lost its connection; reconnecting \
                         (waits are answered late meanwhile, none is missed)");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
            lost = true;
        }
    })
}

/// One connection's life: `LISTEN`, then notices until the connection ends.
/// `Ok` once it was listening, whatever ended it after.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    waiters: &Waiters,
    reconnected: bool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
    let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    // The connection only moves while polled: a task of its own drives it
    // and hands the notices over.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        break None;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Some(e),
                None => break None,
            }
        }
    });
    let listening = client.batch_execute(&format!("LISTEN {CHANNEL}")).await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e);
    }
    if reconnected {
        tracing::info!("the database listener is back; every parked wait re-checks");
        waiters.wake_all();
    }
    let mut probe = tokio::time::interval(PROBE_EVERY);
    probe.tick().await;
    loop {
        tokio::select! {
            n = notices.recv() => match n {
                Some(payload) => match payload.parse() {
                    Ok(user) => waiters.devices_changed(user),
                    Err(_) => tracing::warn!(%payload, "unexpected notice on the change channel"),
                },
                None => break,
            },
            _ = probe.tick() => {
                if client.simple_query("SELECT 1").await.is_err() {
                    break;
                }
            }
        }
    }
    driver.abort();
    tracing::warn!("the database listener's connection ended; reconnecting");
    Ok(())
}
