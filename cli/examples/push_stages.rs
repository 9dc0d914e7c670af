//! What each stage of a first push costs on one thread, over a home's
//! transcripts: `cargo run --release -p evi --example push_stages -- HOME`.
//!
//! Push's main thread reads every line, finds its explicit ids, derives the
//! others (SHA-256), and scans it for secrets; the sealing threads compress,
//! encrypt and MAC 4 MiB segments. Each stage is timed here alone, in
//! memory, in the order push runs them, so its CPU seconds per home can be
//! set beside the push's own. Prints one row per stage.

use std::ops::ControlFlow;
use std::time::Instant;

use evi::sync::seal::zstd_context::compress_into;
use evi::sync::{Entry, Identity, SyncKeys, seal_stream};
use evi::transcript::Catalog;
use evi::transcript::entry_id::IdChain;
use evi::transcript::line::{explicit_ids, parse_head};
use evi::transcript::lines::walk_file;

const SEGMENT: usize = 4 << 20;

fn main() {
    let home = std::env::args().nth(1).expect("usage: push_stages HOME");
    let catalog = Catalog::scan(&std::path::Path::new(&home).join("transcripts")).unwrap();
    let t = Instant::now();
    let mut sessions: Vec<Vec<(evi_shared::Day, Vec<u8>)>> = Vec::new();
    let mut bytes = 0usize;
    for files in catalog.sessions.values() {
        let mut lines = Vec::new();
        for f in files {
            walk_file(&f.path, 0, |_, raw| {
                bytes += raw.len();
                lines.push((f.day, raw.to_vec()));
                ControlFlow::Continue(())
            })
            .unwrap();
        }
        sessions.push(lines);
    }
    let mb = bytes as f64 / 1e6;
    row("read lines (into memory)", t, mb);
    let all = || sessions.iter().flatten().map(|(_, l)| &l[..]);

    let t = Instant::now();
    let named = all().filter(|l| parse_head(l).ids.id.is_some()).count();
    row(&format!("parse_head ({named} lines name an id)"), t, mb);

    let t = Instant::now();
    let named = all().filter(|l| explicit_ids(l).id.is_some()).count();
    row(&format!("explicit_ids ({named} lines name an id)"), t, mb);

    let t = Instant::now();
    let mut ids = Vec::new();
    for s in &sessions {
        let mut chain = IdChain::default();
        for (_, l) in s {
            ids.push(chain.place(l, Default::default()).id);
        }
    }
    row("derived ids (SHA-256)", t, mb);

    if let Some(r) = evi::sync::engine::redact::Redactor::configured(true, &[]).unwrap() {
        let t = Instant::now();
        let hits = all().filter(|l| r.redact_line(l).is_some()).count();
        row(&format!("redaction scan ({hits} lines redacted)"), t, mb);
    }

    let segments: Vec<Vec<u8>> = {
        let mut out = vec![Vec::new()];
        for l in all() {
            if out.last().unwrap().len() + l.len() > SEGMENT {
                out.push(Vec::new());
            }
            out.last_mut().unwrap().extend_from_slice(l);
        }
        out
    };
    for level in [-1, 1, 2, 3] {
        let t = Instant::now();
        let mut z = 0;
        for s in &segments {
            let (v, ()) =
                compress_into(Vec::new(), level, 0, |w| std::io::Write::write_all(w, s)).unwrap();
            z += v.len();
        }
        row(
            &format!(
                "zstd {level}: {:.1} MB ({:.1}%)",
                z as f64 / 1e6,
                100.0 * z as f64 / bytes as f64
            ),
            t,
            mb,
        );
    }

    let identity = Identity::generate();
    let keys = SyncKeys::derive(&identity);
    let t = Instant::now();
    let mut mac = 0u8;
    for s in &segments {
        use hmac::Mac as _;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(&[7; 32]).unwrap();
        m.update(s);
        mac ^= m.finalize().into_bytes()[0];
    }
    row(&format!("HMAC-SHA256 ({mac})"), t, mb);

    let t = Instant::now();
    let mut sealed = 0;
    let mut id = ids.into_iter();
    for s in &sessions {
        let mut batch = Vec::new();
        let mut size = 0;
        for (day, l) in s {
            let e = Entry {
                id: id.next().unwrap(),
                parent: None,
                day: *day,
                line: l.clone(),
                line_blob: None,
            };
            size += l.len();
            batch.push(e);
            if size > SEGMENT {
                sealed += seal_stream(&keys, &identity, "s", &batch)
                    .unwrap()
                    .ciphertext
                    .len();
                batch.clear();
                size = 0;
            }
        }
        if !batch.is_empty() {
            sealed += seal_stream(&keys, &identity, "s", &batch)
                .unwrap()
                .ciphertext
                .len();
        }
    }
    row(
        &format!(
            "seal_stream (zstd 3, age, MAC): {:.1} MB",
            sealed as f64 / 1e6
        ),
        t,
        mb,
    );
}

fn row(what: &str, t: Instant, mb: f64) {
    let s = t.elapsed().as_secs_f64();
    println!("{what:60} {s:7.3} s {:8.0} MB/s", mb / s);
}
