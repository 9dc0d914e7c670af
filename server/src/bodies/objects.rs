//! Bodies in an S3-compatible bucket: one object per pack, at
//! `PREFIX/bodies/<user id>/<pack ULID>`.
//!
//! [`ObjectPacks::put_batch`] returns once the PUT (or the multipart
//! upload's completion) has returned: S3 makes an object durable before it
//! answers, and an object appears whole or not at all, so a row committed
//! after it never points at a half-written pack. Bodies are read back by
//! range GETs. Nothing is written to the local disk on the way.

use std::ops::Range;

use async_trait::async_trait;
use axum::body::Bytes;
use futures_util::TryStreamExt as _;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, GetRange, ObjectStoreExt as _, PutPayload, WriteMultipart};

use super::{BodyError, BodyRef, BodyStore, BodyStream, PackName};
use crate::storage::{Bucket, is_not_found};
use crate::store::UserId;

/// Packs up to this size go in one PUT; larger ones in parts of this size
/// (S3 wants parts of at least 5 MiB but the last).
pub const PART_BYTES: usize = 8 * 1024 * 1024;

/// Parts of one upload in flight at once: bounds what an upload holds in
/// memory to a few parts.
pub const PARTS_IN_FLIGHT: usize = 2;

const AREA: &str = "bodies";

#[derive(Debug, Clone)]
pub struct ObjectPacks {
    bucket: Bucket,
}

impl ObjectPacks {
    pub fn new(bucket: Bucket) -> Self {
        Self { bucket }
    }

    /// The object of a pack (tests and operators look here).
    pub fn path(&self, user: UserId, pack: &PackName) -> ObjPath {
        self.bucket.user_dir(AREA, user).join(pack.as_str())
    }
}

/// A store error as a body error: a missing pack is damage the metadata
/// points at (`NotFound`, as a missing pack file is); anything else means
/// the store did not do what was asked, worth a retry.
pub(crate) fn body_error(e: object_store::Error) -> BodyError {
    if is_not_found(&e) {
        BodyError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            e.to_string(),
        ))
    } else {
        BodyError::Unavailable(e.to_string())
    }
}

/// Writes `parts` as one object: a single PUT when it is small, else a
/// multipart upload, aborted if a part fails so no parts are left billed.
pub(crate) async fn put_whole(
    bucket: &Bucket,
    path: &ObjPath,
    parts: Vec<Bytes>,
) -> Result<(), object_store::Error> {
    let total: usize = parts.iter().map(Bytes::len).sum();
    if total <= PART_BYTES {
        let payload: PutPayload = parts.into_iter().collect();
        bucket.store.put(path, payload).await?;
        return Ok(());
    }
    let upload = bucket.put_multipart(path).await?;
    let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    for p in parts {
        if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
            let _ = w.abort().await;
            return Err(e);
        }
        w.put(p);
    }
    w.finish().await?;
    Ok(())
}

#[async_trait]
impl BodyStore for ObjectPacks {
    async fn put_batch(&self, user: UserId, bodies: Vec<Bytes>) -> Result<Vec<BodyRef>, BodyError> {
        if bodies.is_empty() {
            return Ok(Vec::new());
        }
        let pack = PackName::new();
        let mut offset = 0u64;
        let refs = bodies
            .iter()
            .map(|b| {
                let r = BodyRef {
                    pack: pack.clone(),
                    offset,
                    len: b.len() as u64,
                };
                offset += b.len() as u64;
                r
            })
            .collect();
        put_whole(&self.bucket, &self.path(user, &pack), bodies)
            .await
            .map_err(body_error)?;
        Ok(refs)
    }

    async fn put_pack(&self, user: UserId, pack: &PackName, bytes: Bytes) -> Result<(), BodyError> {
        // A PUT replaces whole, and a pack's name is only ever given to
        // these bytes: writing it again changes nothing.
        put_whole(&self.bucket, &self.path(user, pack), vec![bytes])
            .await
            .map_err(body_error)
    }

    async fn open(&self, user: UserId, r: &BodyRef) -> Result<BodyStream, BodyError> {
        let want = r.len;
        if want == 0 {
            return Ok(Box::pin(futures_util::stream::empty()));
        }
        let short = || BodyError::Short {
            pack: r.pack.clone(),
            offset: r.offset,
            want,
        };
        let options = GetOptions {
            range: Some(GetRange::Bounded(r.offset..r.offset.saturating_add(want))),
            ..GetOptions::default()
        };
        let got = self
            .bucket
            .store
            .get_opts(&self.path(user, &r.pack), options)
            .await
            .map_err(body_error)?;
        if got.range.end - got.range.start < want {
            return Err(short());
        }
        // A connection cut mid-body fails the stream, never ends it early.
        let chunks = got.into_stream().map_err(std::io::Error::other);
        Ok(super::exactly(chunks, want))
    }

    /// One `get_ranges` per run of refs in the same pack, which the store
    /// merges into few GETs (a page of small records is mostly one pack).
    async fn read_small(&self, user: UserId, refs: Vec<BodyRef>) -> Result<Vec<Bytes>, BodyError> {
        let mut out = Vec::with_capacity(refs.len());
        let mut i = 0;
        while i < refs.len() {
            let pack = &refs[i].pack;
            let run = refs[i..].iter().take_while(|r| &r.pack == pack).count();
            let ranges: Vec<Range<u64>> = refs[i..i + run]
                .iter()
                .map(|r| r.offset..r.offset.saturating_add(r.len))
                .collect();
            // Zero-length ranges are not asked for (S3 refuses them).
            let asked: Vec<Range<u64>> = ranges.iter().filter(|r| !r.is_empty()).cloned().collect();
            let mut got = if asked.is_empty() {
                Vec::new()
            } else {
                self.bucket
                    .store
                    .get_ranges(&self.path(user, pack), &asked)
                    .await
                    .map_err(body_error)?
            }
            .into_iter();
            for (r, range) in refs[i..i + run].iter().zip(&ranges) {
                if range.is_empty() {
                    out.push(Bytes::new());
                    continue;
                }
                let b = got.next().unwrap_or_default();
                if (b.len() as u64) < r.len {
                    return Err(BodyError::Short {
                        pack: r.pack.clone(),
                        offset: r.offset,
                        want: r.len,
                    });
                }
                out.push(b);
            }
            i += run;
        }
        Ok(out)
    }

    async fn list_packs(&self) -> Result<Vec<(UserId, PackName)>, BodyError> {
        let root = self.bucket.prefix.clone().join(AREA);
        let mut listing = self.bucket.store.list(Some(&root));
        let mut out = Vec::new();
        while let Some(meta) = listing.try_next().await.map_err(body_error)? {
            // PREFIX/bodies/<user>/<pack>; anything else is not ours to judge.
            let Some(rest) = meta.location.prefix_match(&root) else {
                continue;
            };
            let parts: Vec<_> = rest.collect();
            if let [user, pack] = parts.as_slice()
                && let (Ok(user), Ok(pack)) = (
                    user.as_ref().parse::<UserId>(),
                    pack.as_ref().parse::<PackName>(),
                )
            {
                out.push((user, pack));
            }
        }
        Ok(out)
    }

    async fn stored_bytes(&self) -> Option<Result<u64, BodyError>> {
        Some(self.bucket.bytes_under(AREA).await.map_err(body_error))
    }

    async fn remove_pack(&self, user: UserId, pack: &PackName) -> Result<(), BodyError> {
        match self.bucket.store.delete(&self.path(user, pack)).await {
            Err(e) if !is_not_found(&e) => Err(body_error(e)),
            _ => Ok(()),
        }
    }
}
