//! The overall deadline of a request that has not shown a valid token: its
//! body must be in within [`crate::config::Timeouts::request`] of its
//! header, however it trickles. The per-byte body timeout alone restarts on
//! every byte, so one byte every 20 s held a login open for as long as the
//! client liked.
//!
//! A request whose token checks out ([`crate::auth::Authed`]) lifts its
//! deadline: a push or a 64 MiB blob upload on a slow link may take long,
//! and its sender is known and bounded by its account's limits. The token
//! is checked before any handler reads the body, so a made-up token gains
//! nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

/// The body was not in by its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within its deadline")]
pub struct DeadlinePassed;

/// In each request's extensions: lifting it ends the deadline of its body.
#[derive(Clone, Debug, Default)]
pub struct Deadline(Arc<AtomicBool>);

impl Deadline {
    pub fn lift(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn lifted(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `inner` cut with [`DeadlinePassed`] once `after` has passed, unless the
/// [`Deadline`] was lifted by then.
pub struct DeadlineBody<B> {
    inner: Pin<Box<B>>,
    sleep: Pin<Box<Sleep>>,
    deadline: Deadline,
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, after: Duration, deadline: Deadline) -> Self {
        Self {
            inner: Box::pin(inner),
            sleep: Box::pin(tokio::time::sleep(after)),
            deadline,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if !self.deadline.lifted() && self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(DeadlinePassed.into())));
        }
        self.inner.as_mut().poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
