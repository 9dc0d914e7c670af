//! A framed pull page reads its bodies ahead, several at once (see
//! `RUNS_AHEAD` in the server's framed pull): pages whose records span many
//! reads (small bodies grouped, large ones alone, over several packs) come
//! back whole, each body byte for byte and in seq order, on whichever body
//! store the target runs (a pack folder here, the bucket on Postgres).

use crate::common::TestServer;
use crate::wire::{Seg, seg};

#[tokio::test]
async fn pages_read_ahead_come_back_in_seq_order_byte_for_byte() {
    let srv = TestServer::start(&[]);
    let a = srv.register("readahead").await;
    // Three pushes (three packs) of mixed sizes: tiny, a few hundred KB
    // (one read each), and above the grouping limit (streamed alone).
    let sizes = [
        1usize, 300_000, 17, 700_000, 250_000, 4_000, 600_001, 90_000, 0, 520_000,
    ];
    let mut sent: Vec<Seg> = Vec::new();
    for push in 0..3u64 {
        let segs: Vec<Seg> = (0..12u64)
            .map(|i| {
                let n = push * 100 + i;
                seg(n % 5, n, sizes[(n as usize) % sizes.len()] + n as usize)
            })
            .collect();
        let v = a.push_frames(&segs).await;
        assert_eq!(v["stored"], 12, "{v}");
        sent.extend(segs);
    }
    let (all, pages) = a.pull_all_frames().await;
    // Pages of the default 4 MiB: several, each with many reads.
    assert!(pages.len() >= 2, "{} pages", pages.len());
    assert_eq!(all.len(), sent.len());
    let mut last = 0;
    for ((head, body), want) in all.iter().zip(&sent) {
        assert!(head.seq > last, "seq {} after {last}", head.seq);
        last = head.seq;
        assert_eq!(head.entry_ids, want.head.entry_ids);
        assert!(
            body == &want.body,
            "body of seq {} differs ({} bytes, want {})",
            head.seq,
            body.len(),
            want.body.len()
        );
    }
}
