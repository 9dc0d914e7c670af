//! Splitting, joining and manifest checks, without a server: parts are
//! sealed the way `send_parts` seals them and joined by `join_parts`.

use std::io::{self, Read, Write};
use std::iter;

use sha2::{Digest, Sha256};

use super::fetch::{Capped, join_parts, read_manifest};
use super::manifest::{AGE_HEADER_ROOM, MANIFEST_MAX_BYTES};
use super::upload::hash_parts;
use super::*;
use crate::sync::{BlobError, Identity, SyncKeys, TEST_IDENTITY, seal_blob};

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Bytes that do not compress and do not repeat with the chunk size.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Seals `data` as its parts under `limit`, as an upload would.
fn split(id: &Identity, data: &[u8], limit: u64) -> (PartManifest, Vec<Vec<u8>>) {
    let part = part_size_for(limit).expect("limit holds a part");
    let m = PartManifest::new(&sha(data), data.len() as u64, part);
    let parts = (0..m.parts)
        .map(|i| {
            let (start, len) = m.part_range(i);
            let slice = &data[start as usize..(start + len) as usize];
            let (ct, _) = seal_blob(id, slice, Vec::new()).unwrap();
            assert!(ct.len() as u64 <= limit, "part {i} fits the limit");
            ct
        })
        .collect();
    (m, parts)
}

fn join(
    id: &Identity,
    m: &PartManifest,
    parts: &[Option<Vec<u8>>],
) -> Result<Option<Vec<u8>>, TransferError> {
    let mut out = io::Cursor::new(Vec::new());
    let r = join_parts(
        id,
        m,
        |i| Ok(parts[i as usize].clone().map(io::Cursor::new)),
        Err,
        &mut out,
    )?;
    let out = out.into_inner();
    Ok(r.map(|n| {
        assert_eq!(n, out.len() as u64);
        out
    }))
}

#[test]
fn sealed_len_bounds_real_age_files() {
    let id = Identity::generate();
    for n in [0, 1, 1000, 65_535, 65_536, 65_537, 200_000, 3 * 65_536] {
        let (ct, _) = seal_blob(&id, &noise(n)[..], Vec::new()).unwrap();
        let bound = sealed_len(n as u64);
        assert!(ct.len() as u64 <= bound, "{n}: {} > {bound}", ct.len());
        // The margin is a header's worth, not a multiple of the blob.
        assert!(bound - (ct.len() as u64) < AGE_HEADER_ROOM, "{n}");
    }
}

#[test]
fn part_size_fits_the_limit() {
    for limit in [
        2100,
        8 * 1024,
        70_000,
        AGE_HEADER_ROOM + 65_552,
        1 << 20,
        64 << 20,
    ] {
        let p = part_size_for(limit).unwrap();
        assert!(sealed_len(p) <= limit, "{limit}");
        assert!(sealed_len(p + 1) > limit, "{limit}: {p} is not the largest");
    }
    // A part of a 1 MiB limit is within a few KB of it.
    assert!(part_size_for(1 << 20).unwrap() > (1 << 20) - 2 * AGE_HEADER_ROOM);
    assert_eq!(part_size_for(sealed_len(MIN_PART_BYTES) - 1), None);
    assert_eq!(
        part_size_for(sealed_len(MIN_PART_BYTES)),
        Some(MIN_PART_BYTES)
    );
    assert_eq!(part_size_for(100), None);
}

#[test]
fn split_and_join_round_trip_and_parts_are_plain_age() {
    let id = Identity::generate();
    let data = noise(300_000);
    let (m, parts) = split(&id, &data, 70_000);
    assert_eq!(m.part_size, part_size_for(70_000).unwrap());
    assert_eq!(m.parts, 5);
    assert_eq!(parts.len(), 5);
    // Each part alone is a standard age file of its slice, compressed; in
    // order they are the blob.
    let mut cat = Vec::new();
    for ct in &parts {
        let dec = age::Decryptor::new(&ct[..]).unwrap();
        let mut z = Vec::new();
        dec.decrypt(iter::once(id.age_identity() as &dyn age::Identity))
            .unwrap()
            .read_to_end(&mut z)
            .unwrap();
        cat.extend(zstd::decode_all(&z[..]).unwrap());
    }
    assert_eq!(cat, data);
    let parts: Vec<_> = parts.into_iter().map(Some).collect();
    assert_eq!(join(&id, &m, &parts).unwrap().unwrap(), data);
}

#[test]
fn a_part_cut_short_is_read_again_over_what_it_wrote() {
    let id = Identity::generate();
    let data = noise(300_000);
    let (m, parts) = split(&id, &data, 70_000);
    // Part 2 arrives cut in half the first time, whole the second.
    let mut served = vec![0; parts.len()];
    let mut retried = 0;
    let mut out = io::Cursor::new(Vec::new());
    let size = join_parts(
        &id,
        &m,
        |i| {
            let i = i as usize;
            served[i] += 1;
            let ct = &parts[i];
            let cut = i == 2 && served[i] == 1;
            Ok(Some(io::Cursor::new(if cut {
                ct[..ct.len() / 2].to_vec()
            } else {
                ct.clone()
            })))
        },
        |_| {
            retried += 1;
            Ok(())
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(size, Some(data.len() as u64));
    assert_eq!(
        out.into_inner(),
        data,
        "the blob, the cut part's bytes once"
    );
    assert_eq!((retried, served), (1, vec![1, 1, 2, 1, 1]));
}

#[test]
fn a_blob_that_is_an_exact_number_of_parts_joins() {
    let id = Identity::generate();
    let part = part_size_for(70_000).unwrap();
    let data = noise(4 * part as usize);
    let (m, parts) = split(&id, &data, 70_000);
    assert_eq!(m.parts, 4);
    assert_eq!(m.part_range(3), (3 * part, part));
    let parts: Vec<_> = parts.into_iter().map(Some).collect();
    assert_eq!(join(&id, &m, &parts).unwrap().unwrap(), data);
}

#[test]
fn a_missing_part_is_missing_not_an_error() {
    let id = Identity::generate();
    let data = noise(200_000);
    let (m, parts) = split(&id, &data, 70_000);
    let mut parts: Vec<_> = parts.into_iter().map(Some).collect();
    parts[2] = None;
    assert!(join(&id, &m, &parts).unwrap().is_none());
}

#[test]
fn swapped_truncated_foreign_or_long_parts_are_refused() {
    let id = Identity::generate();
    let data = noise(300_000);
    let (m, parts) = split(&id, &data, 70_000);
    let ok: Vec<_> = parts.iter().cloned().map(Some).collect();

    // Two full parts swapped: every length fits, the whole hash does not.
    let mut swapped = ok.clone();
    swapped.swap(0, 1);
    let e = join(&id, &m, &swapped).unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Refused {
                source: BlobError::HashMismatch { .. },
                ..
            }
        ),
        "{e}"
    );

    // A part cut short fails to decrypt (age authenticates its chunks).
    let mut cut = ok.clone();
    let p = cut[1].as_mut().unwrap();
    p.truncate(p.len() - 10);
    let e = join(&id, &m, &cut).unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Refused {
                source: BlobError::Decrypt(_),
                ..
            }
        ),
        "{e}"
    );

    // A part sealed to another identity.
    let other = Identity::generate();
    let mut foreign = ok.clone();
    foreign[0] = Some(seal_blob(&other, &data[..65_536], Vec::new()).unwrap().0);
    assert!(matches!(
        join(&id, &m, &foreign).unwrap_err(),
        TransferError::Refused {
            source: BlobError::Decrypt(_),
            ..
        }
    ));

    // The short last part put first: longer or shorter than its place says.
    let mut misplaced = ok.clone();
    misplaced[0] = ok[4].clone();
    let e = join(&id, &m, &misplaced).unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Manifest {
                source: ManifestError::PartLength { index: 0, .. },
                ..
            }
        ),
        "{e}"
    );
    let mut long = ok.clone();
    long[4] = ok[0].clone();
    let e = join(&id, &m, &long).unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Manifest {
                source: ManifestError::PartLength { index: 4, .. },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn hash_parts_matches_the_split() {
    let data = noise(150_000);
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&data).unwrap();
    let h = hash_parts(&mut f, 65_536).unwrap();
    assert_eq!(h.whole, sha(&data));
    assert_eq!(h.size, data.len() as u64);
    assert_eq!(
        h.parts,
        vec![
            sha(&data[..65_536]),
            sha(&data[65_536..131_072]),
            sha(&data[131_072..])
        ]
    );
    let mut empty = tempfile::tempfile().unwrap();
    let h = hash_parts(&mut empty, 65_536).unwrap();
    assert_eq!((h.size, h.parts.len()), (0, 0));
}

fn manifest_json(sha: &str, size: u64, part_size: u64, parts: u64) -> Vec<u8> {
    format!(
        r#"{{"format":"evi-blob-parts","version":1,"sha256":"{sha}","size":{size},"part_size":{part_size},"parts":{parts}}}"#
    )
    .into_bytes()
}

#[test]
fn manifest_round_trips_in_its_documented_form() {
    let s = sha(b"x");
    let m = PartManifest::new(&s, 3 << 20, 983_040);
    assert_eq!(m.parts, 4);
    assert_eq!(m.to_bytes(), manifest_json(&s, 3 << 20, 983_040, 4));
    assert_eq!(PartManifest::parse(&m.to_bytes(), &s).unwrap(), m);
    assert_eq!(m.part_range(3), (3 * 983_040, (3 << 20) - 3 * 983_040));
}

#[test]
fn hostile_manifests_are_refused() {
    let s = sha(b"x");
    let parse = |b: &[u8]| PartManifest::parse(b, &s);
    let max = MAX_BLOB_TOTAL_BYTES;

    assert!(matches!(
        parse(b"not json"),
        Err(ManifestError::NotManifest(_))
    ));
    assert!(matches!(parse(b"{}"), Err(ManifestError::NotManifest(_))));
    let other_format = String::from_utf8(manifest_json(&s, 10_000, 4096, 3))
        .unwrap()
        .replace("evi-blob-parts", "something-else");
    assert!(matches!(
        parse(other_format.as_bytes()),
        Err(ManifestError::NotManifest(_))
    ));
    let v2 = String::from_utf8(manifest_json(&s, 10_000, 4096, 3))
        .unwrap()
        .replace("\"version\":1", "\"version\":2");
    assert_eq!(parse(v2.as_bytes()), Err(ManifestError::Version(2)));
    // Another blob's manifest moved under this blob's name.
    let o = sha(b"y");
    assert_eq!(
        parse(&manifest_json(&o, 10_000, 4096, 3)),
        Err(ManifestError::OtherBlob(o))
    );
    // Sizes: empty, past the cap, negative-looking.
    assert_eq!(
        parse(&manifest_json(&s, 0, 4096, 0)),
        Err(ManifestError::Size(0))
    );
    assert_eq!(
        parse(&manifest_json(&s, max + 1, 1 << 30, 65)),
        Err(ManifestError::Size(max + 1))
    );
    assert!(matches!(
        parse(br#"{"format":"evi-blob-parts","version":1,"sha256":"x","size":-1,"part_size":1,"parts":1}"#),
        Err(ManifestError::NotManifest(_))
    ));
    // Tiny parts: millions of requests for one blob.
    assert_eq!(
        parse(&manifest_json(&s, 1 << 30, 1, 1 << 30)),
        Err(ManifestError::PartSize(1))
    );
    assert_eq!(
        parse(&manifest_json(&s, 10_000, 0, 0)),
        Err(ManifestError::PartSize(0))
    );
    // Counts that do not add up: too many parts, too few, u64::MAX.
    for parts in [4, 2, u64::MAX] {
        assert_eq!(
            parse(&manifest_json(&s, 10_000, 4096, parts)),
            Err(ManifestError::Count {
                parts,
                part_size: 4096,
                size: 10_000
            })
        );
    }
    // The largest blob allowed, in the smallest parts, is still bounded.
    let m = parse(&manifest_json(
        &s,
        max,
        MIN_PART_BYTES,
        max / MIN_PART_BYTES,
    ))
    .unwrap();
    assert!(m.parts <= m.size / m.part_size + 1);
    // A manifest padded past its cap is not even parsed.
    let mut padded = manifest_json(&s, 10_000, 4096, 3);
    padded.extend(std::iter::repeat_n(b' ', MANIFEST_MAX_BYTES as usize));
    assert_eq!(parse(&padded), Err(ManifestError::TooLong));
}

#[test]
fn a_manifest_is_read_from_its_age_file() {
    let id = Identity::generate();
    let s = sha(b"x");
    let m = PartManifest::new(&s, 10_000, 4096);
    let (ct, _) = seal_blob(&id, &m.to_bytes()[..], Vec::new()).unwrap();
    assert_eq!(read_manifest(&id, &s, &ct[..]).unwrap(), m);
    let e = read_manifest(&id, &sha(b"y"), &ct[..]).unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Manifest {
                source: ManifestError::OtherBlob(_),
                ..
            }
        ),
        "{e}"
    );
    // An endless manifest stops at the cap.
    let (ct, _) = seal_blob(&id, &vec![b' '; 1 << 20][..], Vec::new()).unwrap();
    assert!(matches!(
        read_manifest(&id, &s, &ct[..]).unwrap_err(),
        TransferError::Manifest {
            source: ManifestError::TooLong,
            ..
        }
    ));
}

#[test]
fn the_capped_writer_stops_at_the_cap() {
    let mut w = Capped::new(Vec::new());
    w.left = 10;
    w.write_all(b"12345").unwrap();
    assert!(w.write_all(b"123456").is_err());
    assert!(w.over);
    assert_eq!(w.inner, b"12345");
}

/// Frozen: the names parts and manifests are stored under cross devices.
#[test]
fn part_and_manifest_names_are_frozen_and_separate() {
    let keys = SyncKeys::derive(&Identity::from_secret_str(TEST_IDENTITY).unwrap());
    let s = sha(b"checkpoint bytes");
    let whole = keys.blob_key(&s);
    let manifest = keys.blob_manifest_key(&s);
    let p0 = keys.blob_part_key(&s, 0, 4);
    let names = [
        whole.clone(),
        manifest.clone(),
        p0.clone(),
        keys.blob_part_key(&s, 1, 4),
        keys.blob_part_key(&s, 0, 5),
    ];
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(
        p0,
        keys.keyed_raw(&[
            b"blob-part",
            s.as_bytes(),
            &0u64.to_be_bytes(),
            &4u64.to_be_bytes()
        ])
    );
    assert_eq!(manifest, keys.keyed_raw(&[b"blob-manifest", s.as_bytes()]));
    assert_eq!(manifest.to_string(), FROZEN_MANIFEST_NAME);
    assert_eq!(p0.to_string(), FROZEN_PART0_NAME);
}

// Computed outside this code (Python's hmac and an HKDF by hand from the
// test identity's secret), not copied from a run.
const FROZEN_MANIFEST_NAME: &str =
    "6005230bfa52867904aec384483d8c5fe2370e8b89ba5aa0f15de9cd78d92fae";
const FROZEN_PART0_NAME: &str = "8626a27ab27c2ef3ef7f808c34bdf93de2a3099733c502b6961d9a3e620be03a";
