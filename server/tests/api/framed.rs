//! The framed wire of `/api/v1/records`: bytes come back exactly as pushed,
//! on either wire in either direction; pages stay within the byte limit as
//! sent; bad bodies are refused with a message; bodies live in packs.

use base64::Engine as _;
use evi_server::store::record_cost;
use evi_shared::frames;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{TestServer, segment};
use crate::wire::{Seg, id, push_body, seg};

#[tokio::test]
async fn framed_push_and_pull_round_trip_and_mix_with_json() {
    let srv = TestServer::start(&[]);
    let a = srv.register("framed").await;
    // Sizes across chunk boundaries, a zero-length body, several entry ids.
    let mut segs: Vec<Seg> = [0usize, 1, 1000, 300_000, 70_000]
        .iter()
        .enumerate()
        .map(|(i, &len)| seg(1, i as u64, len))
        .collect();
    segs[2].head.entry_ids.push(id(2, 100));
    let v = a.push_frames(&segs).await;
    assert_eq!(
        (
            v["stored"].as_u64(),
            v["dropped"].as_u64(),
            v["newest_seq"].as_u64()
        ),
        (Some(5), Some(0), Some(5))
    );
    // One pack for the whole batch.
    assert_eq!(srv.packs().len(), 1, "{:?}", srv.packs());

    let (got, _) = a.pull_all_frames().await;
    assert_eq!(got.len(), segs.len());
    let (_, devices) = a.get("/api/v1/devices").await;
    let device = devices["devices"][0]["id"].as_str().unwrap().to_owned();
    for (i, ((head, body), sent)) in got.iter().zip(&segs).enumerate() {
        assert_eq!(head.seq, i as u64 + 1);
        assert_eq!(head.stream, sent.head.stream);
        assert_eq!(head.kind, sent.head.kind);
        assert_eq!(head.entry_ids, sent.head.entry_ids);
        assert_eq!(head.device.as_deref(), Some(device.as_str()));
        assert!(body == &sent.body, "record {i}: bytes differ");
    }

    // The same records on the JSON page, for clients that still speak it.
    let (json_all, _) = a.pull_all(None).await;
    for (r, sent) in json_all.iter().zip(&segs) {
        let ct = base64::engine::general_purpose::STANDARD
            .decode(r["ciphertext"].as_str().unwrap())
            .unwrap();
        assert!(ct == sent.body);
    }

    // A retry stores nothing and leaves no pack behind.
    let v = a.push_frames(&segs).await;
    assert_eq!(
        (v["stored"].as_u64(), v["dropped"].as_u64()),
        (Some(0), Some(5))
    );
    assert_eq!(srv.packs().len(), 1);

    // Pushed as JSON, pulled as frames; and the framed retry of a JSON
    // segment is dropped: one merge by entry id whatever the wire.
    a.push(vec![segment(2, 50, 123)]).await;
    let p = a.pull_frames_page(5, None).await;
    assert_eq!(p.records.len(), 1);
    assert_eq!(p.records[0].1, vec![50u8; 123]);
    assert_eq!((p.end.next_after, p.end.more), (6, false));
    let mut again = seg(2, 50, 123);
    again.body = vec![50u8; 123];
    assert_eq!(a.push_frames(&[again]).await["dropped"], 1);

    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(st["records"], 6);
    // Six records, one of them with two entry ids, and their bodies.
    assert_eq!(
        st["bytes_used"],
        1 + 1000 + 300_000 + 70_000 + 123 + 5 * record_cost(0, 1) + record_cost(0, 2)
    );
    // An empty account answers an empty framed page.
    let b = srv.register("empty").await;
    let p = b.pull_frames_page(0, None).await;
    assert!(p.records.is_empty());
    assert_eq!((p.end.next_after, p.end.more), (0, false));
}

#[tokio::test]
async fn a_framed_page_stays_within_max_page_bytes_as_sent() {
    let srv = TestServer::start(&["--max-page-bytes", "5000"]);
    let a = srv.register("pages").await;
    let segs: Vec<Seg> = (0..40).map(|i| seg(3, i, 300)).collect();
    a.push_frames(&segs).await;
    let (all, pages) = a.pull_all_frames().await;
    assert!(pages.len() > 3, "{} pages", pages.len());
    for (i, p) in pages.iter().enumerate() {
        assert!(p.wire_bytes <= 5000, "page {i} sent {} bytes", p.wire_bytes);
        assert_eq!(p.end.more, i + 1 < pages.len(), "page {i}");
    }
    let seqs: Vec<u64> = all.iter().map(|(h, _)| h.seq).collect();
    assert_eq!(
        seqs,
        (1..=40).collect::<Vec<_>>(),
        "each record once, in order"
    );
    for ((_, body), sent) in all.iter().zip(&segs) {
        assert!(body == &sent.body);
    }
    // A record larger than a page still comes, alone.
    a.push_frames(&[seg(3, 99, 20_000)]).await;
    let p = a.pull_frames_page(40, None).await;
    assert_eq!(p.records.len(), 1);
    assert_eq!(p.records[0].1.len(), 20_000);
    // The count limit still holds.
    let p = a.pull_frames_page(0, Some(3)).await;
    assert_eq!(
        (p.records.len(), p.end.next_after, p.end.more),
        (3, 3, true)
    );
}

#[tokio::test]
async fn bad_framed_bodies_are_400_other_types_415_and_nothing_is_stored() {
    let srv = TestServer::start(&["--max-batch-bytes", "65536"]);
    let a = srv.register("bad").await;
    let good = push_body(&[seg(1, 1, 100)]);
    let ct = Some(frames::CONTENT_TYPE);

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage", b"hello, world".to_vec(), "bad magic"),
        (
            "JSON sent as frames",
            br#"{"segments":[]}"#.to_vec(),
            "bad magic",
        ),
        (
            "cut before the end frame",
            good[..good.len() - 3].to_vec(),
            "ended before its end frame",
        ),
        (
            "cut mid-body",
            good[..60].to_vec(),
            "ended before its end frame",
        ),
        (
            "trailing bytes",
            [good.clone(), b"x".to_vec()].concat(),
            "after the end frame",
        ),
    ];
    for (what, body, msg) in cases {
        let (st, v) = a.post_records_raw(ct, body).await;
        assert_eq!(
            (st, v["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_request")),
            "{what}: {v}"
        );
        let m = v["message"].as_str().unwrap();
        assert!(
            m.contains("invalid framed body") && m.contains(msg),
            "{what}: {m}"
        );
    }

    // A bad id in a head is invalid_id, as on the JSON wire.
    let mut body = frames::start_body();
    frames::write_frame(
        &mut body,
        frames::Tag::Segment,
        &json!({"stream": "../../x", "kind": "entries", "entry_ids": [id(2, 1)]}),
        b"ct",
    );
    frames::write_frame(&mut body, frames::Tag::End, &json!({}), &[]);
    let (st, v) = a.post_records_raw(ct, body).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_id")),
        "{v}"
    );

    // The same rules as JSON: kind, at least one entry id.
    let mut s = seg(1, 1, 4);
    s.head.kind = "../x".into();
    assert_eq!(
        a.post_records_raw(ct, push_body(&[s])).await.0,
        StatusCode::BAD_REQUEST
    );
    let mut s = seg(1, 1, 4);
    s.head.entry_ids.clear();
    let (st, v) = a.post_records_raw(ct, push_body(&[s])).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("at least one entry id")
    );
    // A pull frame is not a push.
    let mut body = frames::start_body();
    frames::write_frame(&mut body, frames::Tag::Record, &json!({}), b"ct");
    frames::write_frame(&mut body, frames::Tag::End, &json!({}), &[]);
    let (st, v) = a.post_records_raw(ct, body).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");

    // Past max_batch_bytes: 413, as on the JSON wire.
    let (st, v) = a
        .post_records_raw(ct, push_body(&[seg(1, 1, 70_000)]))
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );

    // Other content types: 415 with a message naming the two accepted.
    for other in [
        "text/plain",
        "application/octet-stream",
        "multipart/form-data",
    ] {
        let (st, v) = a.post_records_raw(Some(other), good.clone()).await;
        assert_eq!(
            (st, v["code"].as_str()),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Some("unsupported_media_type")
            ),
            "{other}"
        );
        let m = v["message"].as_str().unwrap();
        assert!(
            m.contains("application/json") && m.contains(frames::CONTENT_TYPE),
            "{m}"
        );
    }
    // JSON with a charset parameter is JSON.
    let (st, v) = a
        .post_records_raw(
            Some("application/json; charset=utf-8"),
            serde_json::to_vec(&json!({"segments": [segment(1, 1, 4)]})).unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    let (_, st) = a.get("/api/v1/status").await;
    assert_eq!(st["records"], 1, "only the good JSON push stored");
    assert_eq!(srv.packs().len(), 1, "refused bodies leave no pack");
}

#[tokio::test]
async fn the_openapi_document_describes_both_wires() {
    let srv = TestServer::start(&[]);
    let (st, doc) = srv.anon().get("/api/v1/openapi.json").await;
    assert_eq!(st, StatusCode::OK);
    let path = &doc["paths"]["/api/v1/records"];
    let push = &path["post"]["requestBody"]["content"];
    assert!(push["application/json"].is_object(), "{push}");
    assert!(push[frames::CONTENT_TYPE].is_object(), "{push}");
    let pull = &path["get"]["responses"]["200"]["content"];
    assert!(pull["application/json"].is_object(), "{pull}");
    assert!(pull[frames::CONTENT_TYPE].is_object(), "{pull}");
    assert!(path["post"]["responses"]["415"].is_object());
}
