//! The frozen entry-id vectors (`tests/data/entry-ids.json`, a copy of the
//! design's), checked through the real binary: each case's files become a
//! home, and `evi sessions export S1 -f json` must list exactly the expected
//! entries, ids and parents, in reading order.

use base64::Engine as _;
use serde_json::Value;

use crate::common::Device;

#[test]
fn every_frozen_case_gets_its_ids() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/entry-ids.json"))
        .expect("vectors file");
    let vectors: Value = serde_json::from_str(&text).unwrap();
    let cases = vectors["cases"].as_array().unwrap();
    assert!(cases.len() >= 10, "the vectors file lost cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let dev = Device::new();
        for (day, b64) in case["files"].as_object().unwrap() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_str().unwrap())
                .unwrap();
            dev.write(day, "S1", &bytes);
        }
        let run = dev.evi(&["sessions", "export", "S1", "-f", "json"]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let got: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(
            placements(&got["entries"]),
            placements(&case["entries"]),
            "case {name:?}"
        );
    }
}

/// (day, id, parentId) of each entry, in order.
fn placements(entries: &Value) -> Vec<(String, String, Value)> {
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["day"].as_str().unwrap().to_owned(),
                e["id"].as_str().unwrap().to_owned(),
                e["parentId"].clone(),
            )
        })
        .collect()
}
