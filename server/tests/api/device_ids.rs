//! A device id no device can have (a NUL or another control character in
//! it) is refused at the edge the same way on both backends: Postgres's
//! text cannot hold a NUL, and such ids answered 500 there.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::TestServer;

const NUL_ID: &str = "abc\u{0}def";

#[tokio::test]
async fn ids_no_device_can_have_get_a_4xx_on_every_route_that_names_devices() {
    let srv = TestServer::start(&[]);
    let a = srv.register("ids").await;

    let (st, v) = a
        .call(Method::DELETE, "/api/v1/devices/abc%00def", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "revoke: {v}");

    let (st, v) = a
        .post(
            "/api/v1/rotation/commit",
            json!({"through_seq": 0, "revoke": [NUL_ID]}),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "rotation commit: {v}");
    assert!(v.to_string().contains("revoke"), "names the field: {v}");

    let (st, v) = a
        .post(
            "/api/v1/pair/1/device",
            json!({"device": "desk", "replaces": NUL_ID}),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "pair device: {v}");
    assert!(v.to_string().contains("replaces"), "names the field: {v}");

    let (st, v) = a.get("/api/v1/devices?after=abc%00def").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "device page: {v}");
    assert!(v.to_string().contains("after"), "names the field: {v}");

    // The account still works: nothing half-done behind the refusals.
    let (st, v) = a.get("/api/v1/devices").await;
    assert_eq!(st, StatusCode::OK, "{v}");
}
