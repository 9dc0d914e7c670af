//! Where record bodies and blobs go (`--store URL`): the data folder by
//! default, another folder (`file:///PATH`), or an S3-compatible bucket
//! (`s3://BUCKET/PREFIX`, set up by the standard `AWS_*` variables).
//!
//! A folder keeps the durable folder code of [`crate::bodies::packs`] and
//! [`crate::blobs`] (fsync of file and folder, rename into place) rather
//! than `object_store`'s `LocalFileSystem`: that one does not fsync, so a
//! body it reported stored could vanish in a power cut after its row
//! committed, which breaks the one promise the two stores make together.
//!
//! A bucket is checked at start (listed once), so a wrong name, wrong keys
//! or an endpoint that does not answer stop the server with what to fix
//! instead of failing the first push.

pub mod uploads;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ClientOptions, MultipartUpload, ObjectStore, RetryConfig};

use crate::blobs::objects::ObjectBlobs;
use crate::blobs::{BlobDir, BlobStore};
use crate::bodies::BodyStore;
use crate::bodies::objects::ObjectPacks;
use crate::bodies::packs::PackDir;

/// What `--store` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `file:///PATH`: `PATH/bodies` and `PATH/blobs`.
    Folder(PathBuf),
    /// `s3://BUCKET/PREFIX`: `PREFIX/bodies/...` and `PREFIX/blobs/...`.
    S3 { bucket: String, prefix: String },
}

/// Why `--store` cannot be used; each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum StoreUrlError {
    #[error(
        "--store {0:?}: unknown kind of store; use s3://BUCKET/PREFIX or file:///PATH, \
         or leave --store out to keep bodies and blobs in the data folder"
    )]
    Scheme(String),
    #[error("--store {0:?}: a file:// store needs an absolute path, as in file:///srv/evi-store")]
    RelativeFile(String),
    #[error(
        "--store {0:?}: not a bucket name (3 to 63 lowercase letters, digits, dots or \
         hyphens); keys go in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, never in the URL"
    )]
    Bucket(String),
    #[error("--store {url:?}: the prefix {prefix:?} is not a usable object path: {reason}")]
    Prefix {
        url: String,
        prefix: String,
        reason: String,
    },
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreUrlError;

    fn from_str(url: &str) -> Result<Self, StoreUrlError> {
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(StoreUrlError::RelativeFile(url.to_owned()));
            }
            return Ok(Self::Folder(PathBuf::from(path)));
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(StoreUrlError::Scheme(url.to_owned()));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !ok {
            return Err(StoreUrlError::Bucket(url.to_owned()));
        }
        let prefix = prefix.trim_matches('/');
        ObjPath::parse(prefix).map_err(|e| StoreUrlError::Prefix {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

/// Why the bucket could not be opened at start.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("{store}: {missing} is not set")]
    Missing {
        store: String,
        missing: &'static str,
    },
    #[error(
        "{store}: the endpoint {endpoint} is plain http, which the S3 client refuses \
         unless AWS_ALLOW_HTTP=true"
    )]
    PlainHttp { store: String, endpoint: String },
    #[error("{store}: cannot set up the S3 client: {source}")]
    Config {
        store: String,
        source: object_store::Error,
    },
    #[error("{store}: cannot list the bucket at {endpoint}: {source}")]
    Unreachable {
        store: String,
        endpoint: String,
        source: object_store::Error,
    },
}

impl BucketError {
    /// What the operator can do about it (printed as the `hint:` line).
    pub fn hint(&self) -> &'static str {
        match self {
            Self::Missing { .. } => {
                "set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION (and \
                 AWS_ENDPOINT_URL for a store other than AWS) in the server's environment"
            }
            Self::PlainHttp { .. } => {
                "use an https:// endpoint, or set AWS_ALLOW_HTTP=true for one on a \
                 private network"
            }
            Self::Config { .. } => "check the AWS_* variables in the server's environment",
            Self::Unreachable { .. } => {
                "check that the bucket exists, that AWS_ENDPOINT_URL and AWS_REGION name \
                 where it is, and that the keys may list, read and write it"
            }
        }
    }
}

/// How long one S3 request may take before the server gives up on it and
/// answers 503: the client retries a push or an upload as a whole, so a
/// store that is down costs each request seconds, not the three minutes of
/// `object_store`'s default retries.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_RETRIES: usize = 3;

/// An opened bucket and the prefix everything of this server goes under.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub store: Arc<dyn ObjectStore>,
    /// The same store's low-level multipart calls, which name the upload
    /// (see [`uploads`]).
    multipart: Arc<AmazonS3>,
    pub prefix: ObjPath,
}

impl Bucket {
    /// Starts a multipart upload of `path` that a crash of this process
    /// cannot leave behind for good (see [`uploads`]).
    pub async fn put_multipart(
        &self,
        path: &ObjPath,
    ) -> Result<Box<dyn MultipartUpload>, object_store::Error> {
        uploads::start(self, path).await
    }

    /// The bytes of every object under `PREFIX/AREA` (one LIST request per
    /// 1,000 objects), for the `storage_bytes` metric.
    pub async fn bytes_under(&self, area: &str) -> Result<u64, object_store::Error> {
        use futures_util::TryStreamExt as _;
        let root = self.prefix.clone().join(area);
        let mut listing = self.store.list(Some(&root));
        let mut total = 0u64;
        while let Some(meta) = listing.try_next().await? {
            total = total.saturating_add(meta.size);
        }
        Ok(total)
    }

    /// Builds the client from the `AWS_*` variables and lists the prefix
    /// once. Never puts a key in an error: the store's own messages name
    /// the endpoint and the bucket, not the credentials.
    pub async fn open(bucket: &str, prefix: &str) -> Result<Self, BucketError> {
        let store = if prefix.is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        // Without keys the client would go looking for instance
        // credentials on a metadata address: say what is missing instead.
        for missing in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            if std::env::var_os(missing).is_none_or(|v| v.is_empty()) {
                return Err(BucketError::Missing {
                    store: store.clone(),
                    missing,
                });
            }
        }
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .unwrap_or_else(|_| "AWS".to_owned());
        let allow_http = std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true");
        if endpoint.starts_with("http://") && !allow_http {
            return Err(BucketError::PlainHttp { store, endpoint });
        }
        // The client options from_env read are only AWS_ALLOW_HTTP, set
        // here again: the rest of its variables stay as it read them.
        let client = ClientOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_allow_http(allow_http);
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        install_tls_provider();
        let mut s3 = AmazonS3Builder::from_env();
        // Every body and blob is sealed and MAC'd by the device that wrote
        // it, and every device checks both on the way back: a payload hash
        // in the signature adds nothing a client does not check, and costs a
        // SHA-256 of every byte here and again in the store (a third of a
        // bulk push against s3s-fs). An operator who wants it anyway sets
        // AWS_UNSIGNED_PAYLOAD=false, which from_env has read.
        if std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_none() {
            s3 = s3.with_unsigned_payload(true);
        }
        let s3 = s3
            .with_bucket_name(bucket)
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|source| BucketError::Config {
                store: store.clone(),
                source,
            })?;
        let prefix = ObjPath::parse(prefix).map_err(|e| BucketError::Config {
            store: store.clone(),
            source: e.into(),
        })?;
        let s3 = Arc::new(s3);
        s3.list_with_delimiter(Some(&prefix))
            .await
            .map_err(|source| BucketError::Unreachable {
                store,
                endpoint,
                source,
            })?;
        Ok(Self {
            store: s3.clone(),
            multipart: s3,
            prefix,
        })
    }

    /// `PREFIX/<area>/<user>`.
    pub fn user_dir(&self, area: &str, user: crate::store::UserId) -> ObjPath {
        self.prefix.clone().join(area).join(user.to_string())
    }
}

/// Whether an object-store error says the object is not there (as opposed
/// to a store that did not answer or refused).
pub fn is_not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

/// Where bodies and blobs go, and the bucket when it is one.
pub struct Stores {
    pub bodies: Arc<dyn BodyStore>,
    pub blobs: Arc<dyn BlobStore>,
    pub bucket: Option<Bucket>,
}

/// Opens where bodies and blobs go for `config` (see the module doc).
pub async fn open_stores(config: &crate::Config) -> anyhow::Result<Stores> {
    use anyhow::Context as _;
    let url = config.store_url()?;
    if let Some(StoreUrl::S3 { bucket, prefix }) = &url {
        let bucket = Bucket::open(bucket, prefix).await?;
        return Ok(Stores {
            bodies: Arc::new(ObjectPacks::new(bucket.clone())),
            blobs: Arc::new(ObjectBlobs::new(bucket.clone())),
            bucket: Some(bucket),
        });
    }
    if let Some(StoreUrl::Folder(root)) = &url {
        crate::private::dir(root)
            .with_context(|| format!("cannot create the store folder {}", root.display()))?;
    }
    let bodies = PackDir::open(config.bodies_dir())
        .with_context(|| format!("cannot open body folder {}", config.bodies_dir().display()))?;
    // Replicas on one Postgres database may share the folder: keep the
    // temp files young enough to be another replica's upload under way.
    let blobs = match config.database {
        None => BlobDir::open(config.blobs_dir()),
        Some(_) => BlobDir::open_shared(config.blobs_dir()),
    }
    .with_context(|| format!("cannot open blob folder {}", config.blobs_dir().display()))?;
    Ok(Stores {
        bodies: Arc::new(bodies),
        blobs: Arc::new(blobs),
        bucket: None,
    })
}

/// Makes ring the process's rustls provider, once: object_store's HTTP
/// client (reqwest 0.13 without a provider of its own, so that no aws-lc is
/// built, see Cargo.toml) takes it to reach an S3 store, and panics without
/// one. Anything else that builds an object_store S3 client calls it first.
pub fn install_tls_provider() {
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
