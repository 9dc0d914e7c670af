//! How the compression of segments trades time for size on a real home:
//! the transcripts are cut into segments as push cuts them (per session
//! file, at most 4 MiB of lines) and each segment is compressed at zstd
//! levels 1, 3 and 3 with long-distance matching, one thread, in memory.
//! Prints MB/s of input and the compressed share, per level.
//!
//!     cargo run --release -p evi --example zstd_levels -- HOME
//!
//! (issue 10: "measure zstd levels on the generator's data and pick by the
//! benchmark"; the result is in bench/RESULTS.md.)

use std::io::Write;
use std::time::Instant;

const SEGMENT: usize = 4 << 20;

fn segments(home: &std::path::Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let sorted = |dir: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .expect("read a folder")
            .map(|e| e.expect("a folder entry").path())
            .collect();
        v.sort();
        v
    };
    for day in sorted(&home.join("transcripts")) {
        for file in sorted(&day) {
            segments_of(&std::fs::read(file).expect("read a transcript"), &mut out);
        }
    }
    out
}

fn segments_of(data: &[u8], out: &mut Vec<Vec<u8>>) {
    {
        let mut seg = Vec::new();
        for line in data.split_inclusive(|b| *b == b'\n') {
            if !seg.is_empty() && seg.len() + line.len() > SEGMENT {
                out.push(std::mem::take(&mut seg));
            }
            seg.extend_from_slice(line);
        }
        if !seg.is_empty() {
            out.push(seg);
        }
    }
}

fn compress(seg: &[u8], level: i32, long: bool) -> usize {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level).unwrap();
    if long {
        enc.long_distance_matching(true).unwrap();
        enc.window_log(22).unwrap();
    }
    enc.write_all(seg).unwrap();
    enc.finish().unwrap().len()
}

fn main() {
    let home = std::env::args_os()
        .nth(1)
        .expect("usage: zstd_levels HOME (an eVi home, e.g. made by evi-gen-home)");
    let segs = segments(std::path::Path::new(&home));
    let input: usize = segs.iter().map(Vec::len).sum();
    println!(
        "{} segments, {:.1} MB of lines",
        segs.len(),
        input as f64 / 1e6
    );
    println!("| zstd | MB/s (1 thread) | compressed | of input |");
    println!("|---|---:|---:|---:|");
    for (name, level, long) in [
        ("1", 1, false),
        ("3", 3, false),
        ("3 + long", 3, true),
        ("6", 6, false),
    ] {
        let t = Instant::now();
        let out: usize = segs.iter().map(|s| compress(s, level, long)).sum();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "| {name} | {:.0} | {:.1} MB | {:.1}% |",
            input as f64 / 1e6 / secs,
            out as f64 / 1e6,
            100.0 * out as f64 / input as f64
        );
    }
}
