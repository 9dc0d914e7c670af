//! `storage_bytes` with an `s3://` store: what an operator's dashboard
//! shows as the bucket fills is the bytes of the objects under the server's
//! prefix (bodies and blobs apart), not the empty data folder's zero.

use object_store::ObjectStoreExt as _;

use crate::common::{TestServer, kid, metric};
use crate::s3::{BUCKET, S3Server};
use crate::wire::{Seg, seg};

#[tokio::test]
async fn storage_bytes_counts_the_objects_under_the_servers_prefix() {
    let Some(s3) = S3Server::start() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let store = format!("s3://{BUCKET}/evi");
    let envs = s3.envs();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let srv = TestServer::start_env(
        &[
            "--store",
            store.as_str(),
            "--metrics-listen",
            metrics.as_str(),
        ],
        &envs,
    );
    let a = srv.register("usage").await;
    for push in 0..2u64 {
        let segs: Vec<Seg> = (0..5).map(|i| seg(1, push * 10 + i, 20_000)).collect();
        assert_eq!(a.push_frames(&segs).await["stored"], 5);
    }
    let (st, _) = a.put_blob(&kid(9, 1), vec![7u8; 33_333]).await;
    assert!(st.is_success(), "{st}");
    // Something outside the prefix is not this server's.
    s3.client()
        .put(
            &object_store::path::Path::from("other/bodies/1/x"),
            vec![1u8; 5_000].into(),
        )
        .await
        .unwrap();

    let objects = s3.objects().await;
    let under = |p: &str| -> u64 {
        objects
            .iter()
            .filter(|(k, _)| k.starts_with(p))
            .map(|(_, s)| s)
            .sum()
    };
    let (bodies, blobs) = (under("evi/bodies/"), under("evi/blobs/"));
    assert_eq!(bodies, 10 * 20_000, "{objects:?}");
    assert_eq!(blobs, 33_333, "{objects:?}");
    let part = |p: &str| format!("storage_bytes{{part=\"{p}\"}}");
    assert_eq!(metric(&metrics, &part("bodies")).await, bodies as f64);
    assert_eq!(metric(&metrics, &part("blobs")).await, blobs as f64);
}
