//! Multipart uploads that a crash cannot leave behind.
//!
//! S3 keeps (and bills) the parts of a multipart upload until it is
//! completed or aborted. A server that stops cleanly aborts what it cut
//! (see [`crate::blobs::objects`]), but a replica killed mid-upload leaves
//! parts that no listing of objects shows and no later request names: S3's
//! ListMultipartUploads finds them, and `object_store` does not offer it.
//! So every upload this server starts is written down in the bucket itself
//! before its first part: a small marker object at `PREFIX/uploads/<ULID>`
//! holding the object's path and the upload's id, deleted once the upload
//! is completed or aborted. [`abort_abandoned`] aborts the upload of every
//! marker older than `--upload-ttl-secs` (a day unless set): at every start
//! and every few hours on every replica, so one that never comes back is
//! cleaned up by the others.
//!
//! The one window left is between the upload's creation and its marker's
//! PUT (one request): deploy/README.md still names the bucket's own rule
//! for incomplete uploads, which covers that and any store this does not
//! reach.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::TryStreamExt as _;
use object_store::aws::AmazonS3;
use object_store::multipart::{MultipartStore as _, PartId};
use object_store::path::Path as ObjPath;
use object_store::{
    MultipartId, MultipartUpload, ObjectStore, ObjectStoreExt as _, PutPayload, PutResult,
    UploadPart,
};
use serde::{Deserialize, Serialize};

use super::{Bucket, is_not_found};

/// Where the markers live, under the server's prefix.
const AREA: &str = "uploads";

/// [`crate::Config::upload_ttl`] unless set: a day, as the lifecycle rule
/// deploy/README.md suggests.
pub const UPLOAD_TTL: Duration = Duration::from_secs(24 * 3600);

/// What a marker holds: enough to abort the upload with nothing else.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    path: String,
    upload_id: String,
}

/// Starts a multipart upload of `path`, written down first (see the module
/// doc): completing or aborting the returned upload deletes its marker.
pub(super) async fn start(
    bucket: &Bucket,
    path: &ObjPath,
) -> object_store::Result<Box<dyn MultipartUpload>> {
    let id = bucket.multipart.create_multipart(path).await?;
    let marker = bucket
        .prefix
        .clone()
        .join(AREA)
        .join(ulid::Ulid::new().to_string());
    let body = serde_json::to_vec(&Marker {
        path: path.to_string(),
        upload_id: id.clone(),
    })
    .expect("two strings serialise");
    if let Err(e) = bucket.store.put(&marker, PutPayload::from(body)).await {
        // Not written down: not started either.
        let _ = bucket.multipart.abort_multipart(path, &id).await;
        return Err(e);
    }
    Ok(Box::new(Tracked {
        multipart: bucket.multipart.clone(),
        objects: bucket.store.clone(),
        path: path.clone(),
        id,
        marker,
        parts: Arc::new(Mutex::new(Vec::new())),
    }))
}

/// One upload under way and its marker.
#[derive(Debug)]
struct Tracked {
    multipart: Arc<AmazonS3>,
    objects: Arc<dyn ObjectStore>,
    path: ObjPath,
    id: MultipartId,
    marker: ObjPath,
    /// The parts sent so far by index: `None` until its PUT answered.
    parts: Arc<Mutex<Vec<Option<PartId>>>>,
}

impl Tracked {
    /// The upload is over: its marker goes. A marker that stays is harmless
    /// (the sweep's abort of a finished upload changes nothing).
    async fn drop_marker(&self) {
        if let Err(e) = self.objects.delete(&self.marker).await {
            tracing::warn!(error = %e, marker = %self.marker,
                "could not delete the marker of a finished multipart upload; the sweep removes it");
        }
    }
}

#[async_trait]
impl MultipartUpload for Tracked {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let index = {
            let mut parts = self.parts.lock().expect("parts lock");
            parts.push(None);
            parts.len() - 1
        };
        let (multipart, path, id, parts) = (
            self.multipart.clone(),
            self.path.clone(),
            self.id.clone(),
            self.parts.clone(),
        );
        Box::pin(async move {
            let part = multipart.put_part(&path, &id, index, data).await?;
            parts.lock().expect("parts lock")[index] = Some(part);
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let parts = self
            .parts
            .lock()
            .expect("parts lock")
            .iter()
            .cloned()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| object_store::Error::Generic {
                store: "S3",
                source: "a multipart upload was completed before all its parts were sent".into(),
            })?;
        let done = self
            .multipart
            .complete_multipart(&self.path, &self.id, parts)
            .await?;
        self.drop_marker().await;
        Ok(done)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.multipart.abort_multipart(&self.path, &self.id).await?;
        self.drop_marker().await;
        Ok(())
    }
}

/// Aborts the upload of every marker older than `ttl` and deletes the
/// marker; returns how many. A marker whose abort fails stays for the next
/// sweep; one that cannot be read is deleted (it names nothing to abort).
pub async fn abort_abandoned(bucket: &Bucket, ttl: Duration) -> object_store::Result<usize> {
    let root = bucket.prefix.clone().join(AREA);
    let markers: Vec<_> = bucket.store.list(Some(&root)).try_collect().await?;
    let now = SystemTime::now();
    let mut aborted = 0;
    for meta in markers {
        let age = now
            .duration_since(SystemTime::from(meta.last_modified))
            .unwrap_or_default();
        if age < ttl {
            continue;
        }
        let marker = match bucket.store.get(&meta.location).await {
            Ok(got) => serde_json::from_slice::<Marker>(&got.bytes().await?).ok(),
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e),
        };
        if let Some(m) = &marker {
            let path = ObjPath::from(m.path.as_str());
            match bucket.multipart.abort_multipart(&path, &m.upload_id).await {
                Ok(()) => aborted += 1,
                // Completed, or aborted by S3's own rule, since.
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %e, object = %m.path,
                        "could not abort an abandoned multipart upload; the next sweep tries again");
                    continue;
                }
            }
        }
        match bucket.store.delete(&meta.location).await {
            Err(e) if !is_not_found(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(aborted)
}

/// [`abort_abandoned`], logged: what a start and the periodic sweep run.
pub async fn sweep(bucket: &Bucket, ttl: Duration) {
    match abort_abandoned(bucket, ttl).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            aborted = n,
            "aborted multipart uploads a stopped server left unfinished"
        ),
        Err(e) => tracing::warn!(error = %e,
            "could not sweep abandoned multipart uploads; the next sweep tries again"),
    }
}

/// How often [`sweep`] runs while the server does: a quarter of the ttl,
/// between a second and six hours.
pub fn sweep_every(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(6 * 3600))
}
