//! Blobs in an S3-compatible bucket, at `PREFIX/blobs/<user id>/<keyed name>`.
//!
//! An upload streams through memory a part at a time: up to
//! [`PART_BYTES`] it goes out as one PUT once it has all arrived (and its
//! size is known to fit), past that as a multipart upload whose parts leave
//! while the rest arrives: reading waits while more than [`PARTS_IN_FLIGHT`]
//! parts are in flight, so an upload holds a few parts' worth of memory
//! however large the blob.
//! An upload that passes its limit, is cut, or whose store fails is aborted,
//! so no object appears (S3 shows a multipart object only once it is
//! completed) and no parts stay billed. Nothing touches the local disk.
//!
//! **First upload wins, as far as it matters.** A folder refuses the second
//! rename of a name; a bucket has no such rename, and a conditional create
//! (`If-None-Match: *`) needs configuring on some S3 servers, is missing on
//! others and does not cover a multipart completion everywhere. So: an
//! upload first asks whether the object is there (HEAD) and, if it is,
//! drops its bytes and reports the stored one (`ours: false`), which is
//! first-wins for every upload that starts after another finished. Two
//! uploads of one name that overlap may both write, the later completion
//! replacing the earlier whole (never a mix: each PUT or completion is
//! atomic). That is harmless because a blob's name is a keyed hash of its
//! content, made by the user's own devices: both uploads carry the same
//! content, encrypted for the same key, of the same length, and either
//! object decrypts to what the name promises.
//! `server/tests/api/blob_race.rs` races two uploads of one name
//! on two replicas: both answered, one created, the object one upload whole.

use async_trait::async_trait;
use axum::body::{Body, Bytes};
use evi_shared::KeyedId;
use futures_util::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt as _, PutPayload, WriteMultipart};

use super::{BlobError, BlobStore, BlobStream, Placed, UploadError, drain, next_chunk};
use crate::bodies::objects::{PART_BYTES, PARTS_IN_FLIGHT};
use crate::storage::{Bucket, is_not_found};
use crate::store::UserId;

const AREA: &str = "blobs";

#[derive(Debug, Clone)]
pub struct ObjectBlobs {
    bucket: Bucket,
}

impl ObjectBlobs {
    pub fn new(bucket: Bucket) -> Self {
        Self { bucket }
    }

    /// The object of a blob (tests and operators look here).
    pub fn path(&self, user: UserId, name: &KeyedId) -> ObjPath {
        self.bucket.user_dir(AREA, user).join(name.as_str())
    }
}

fn unavailable(e: object_store::Error) -> UploadError {
    UploadError::Unavailable(e.to_string())
}

/// What is on its way to the bucket: chunks held until they make a part,
/// and the multipart upload once there is more than one part.
struct Outgoing {
    held: Vec<Bytes>,
    held_bytes: usize,
    multipart: Option<WriteMultipart>,
}

impl Outgoing {
    async fn push(
        &mut self,
        bucket: &Bucket,
        path: &ObjPath,
        chunk: Bytes,
    ) -> Result<(), UploadError> {
        self.held_bytes += chunk.len();
        self.held.push(chunk);
        if self.held_bytes < PART_BYTES {
            return Ok(());
        }
        if self.multipart.is_none() {
            let upload = bucket.put_multipart(path).await.map_err(unavailable)?;
            self.multipart = Some(WriteMultipart::new_with_chunk_size(upload, PART_BYTES));
        }
        let w = self.multipart.as_mut().expect("set above");
        w.wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(unavailable)?;
        for c in self.held.drain(..) {
            w.put(c);
        }
        self.held_bytes = 0;
        Ok(())
    }

    async fn finish(self, bucket: &Bucket, path: &ObjPath) -> Result<(), UploadError> {
        match self.multipart {
            None => {
                let payload: PutPayload = self.held.into_iter().collect();
                bucket.store.put(path, payload).await.map_err(unavailable)?;
            }
            Some(mut w) => {
                for c in self.held {
                    w.put(c);
                }
                w.finish().await.map_err(unavailable)?;
            }
        }
        Ok(())
    }

    async fn abort(self) {
        let Some(mut w) = self.multipart else { return };
        // A part still on its way when the upload is aborted can land after
        // the abort, and the bucket keeps it: let the parts in flight arrive
        // (or fail) first, so that the abort takes them all.
        let _ = w.wait_for_capacity(0).await;
        if let Err(e) = w.abort().await {
            tracing::warn!(
                error = %e,
                "could not abort a cut multipart blob upload; a lifecycle rule for \
                 incomplete uploads on the bucket removes its parts"
            );
        }
    }
}

#[async_trait]
impl BlobStore for ObjectBlobs {
    async fn receive(
        &self,
        user: UserId,
        name: &KeyedId,
        body: Body,
        max: u64,
    ) -> Result<Placed, UploadError> {
        let path = self.path(user, name);
        match self.bucket.store.head(&path).await {
            Ok(meta) => {
                drain(body, max).await;
                return Ok(Placed {
                    size: meta.size,
                    ours: false,
                });
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                drain(body, max).await;
                return Err(unavailable(e));
            }
        }
        let mut out = Outgoing {
            held: Vec::new(),
            held_bytes: 0,
            multipart: None,
        };
        let mut body = body;
        let mut size = 0u64;
        loop {
            let chunk = match next_chunk(&mut body).await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    out.abort().await;
                    return Err(e);
                }
            };
            size += chunk.len() as u64;
            if size > max {
                out.abort().await;
                return Err(UploadError::TooLarge(max));
            }
            if let Err(e) = out.push(&self.bucket, &path, chunk).await {
                out.abort().await;
                // The client gets the answer rather than a connection
                // closed under its upload.
                drain(body, max.saturating_sub(size)).await;
                return Err(e);
            }
        }
        out.finish(&self.bucket, &path).await?;
        Ok(Placed { size, ours: true })
    }

    async fn open(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> Result<Option<(u64, BlobStream)>, BlobError> {
        match self.bucket.store.get(&self.path(user, name)).await {
            Ok(got) => {
                let size = got.meta.size;
                let stream = got.into_stream().map_err(std::io::Error::other).boxed();
                Ok(Some((size, stream)))
            }
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(BlobError::Unavailable(e.to_string())),
        }
    }

    async fn stored_bytes(&self) -> Option<Result<u64, BlobError>> {
        Some(
            self.bucket
                .bytes_under(AREA)
                .await
                .map_err(|e| BlobError::Unavailable(e.to_string())),
        )
    }

    async fn remove(&self, user: UserId, name: &KeyedId) -> Result<(), BlobError> {
        match self.bucket.store.delete(&self.path(user, name)).await {
            Err(e) if !is_not_found(&e) => Err(BlobError::Unavailable(e.to_string())),
            _ => Ok(()),
        }
    }
}
