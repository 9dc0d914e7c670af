//! `evi sessions list/show/export/fork` on homes with every odd case a real
//! eVi home can hold. Outputs are compared whole: they are what users read.

use crate::common::{Device, today};

const U1: &str = r#"{"role":"user","content":"hello","ts":"2026-06-08T21:14:00Z"}"#;
const A1: &str = r#"{"role":"assistant","content":"hi","ts":"2026-06-08T21:14:01Z"}"#;

fn lines(ls: &[&str]) -> Vec<u8> {
    ls.iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

/// Every window: the fixtures are dated 2026.
const ALL: [&str; 2] = ["--days", "36500"];

#[test]
fn multi_day_session_lists_once_and_shows_in_day_order() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", &lines(&[U1, A1]));
    dev.write(
        "2026-06-09",
        "S1",
        &lines(&[
            r#"{"role":"user","content":"and the next day?","ts":"2026-06-09T08:00:00Z"}"#,
            r#"{"role":"assistant","content":"still here","ts":"2026-06-09T08:00:05Z"}"#,
        ]),
    );
    let run = dev.evi(&["sessions", "list", ALL[0], ALL[1]]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "ID  START             END                MSGS   BR  FIRST MESSAGE\n\
         S1  2026-06-08 21:14  2026-06-09 08:00      4    1  hello\n"
    );
    let run = dev.evi(&["sessions", "show", "S1"]);
    assert_eq!(
        run.stdout,
        "session S1 (4 messages, 1 branch, 2026-06-08 21:14 → 2026-06-09 08:00)\n\
         \n#1 user  2026-06-08 21:14:00\nhello\n\
         \n#2 assistant  2026-06-08 21:14:01\nhi\n\
         \n#3 user  2026-06-09 08:00:00\nand the next day?\n\
         \n#4 assistant  2026-06-09 08:00:05\nstill here\n"
    );
}

#[test]
fn pending_blank_invalid_and_non_utf8_lines() {
    let dev = Device::new();
    let mut bytes = lines(&[U1, "", "   "]);
    bytes.extend_from_slice(b"{\"role\":\"user\",\"content\":\"cut\n\xff\xfe raw bytes\n");
    bytes.extend_from_slice(&lines(&[A1]));
    bytes.extend_from_slice(br#"{"role":"assistant","content":"still writ"#);
    dev.write("2026-06-08", "S1", &bytes);
    let run = dev.evi(&["sessions", "show", "S1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "session S1 (4 messages, 1 branch, 2026-06-08 21:14 → 2026-06-08 21:14)\n\
         \n#1 user  2026-06-08 21:14:00\nhello\n\
         \n#2 ! invalid line (not valid JSON) in 2026-06-08/S1.jsonl, kept as is:\n\
         {\"role\":\"user\",\"content\":\"cut\n\
         \n#3 ! invalid line (not valid UTF-8) in 2026-06-08/S1.jsonl, kept as is:\n\
         \u{fffd}\u{fffd} raw bytes\n\
         \n#4 assistant  2026-06-08 21:14:01\nhi\n\
         \n(a line is still being written: 41 bytes)\n"
    );
    let list = dev.evi(&["sessions", "list", "--json", ALL[0], ALL[1]]);
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(v["sessions"][0]["messages"], 4);
    assert_eq!(v["sessions"][0]["invalid_lines"], 2);
}

#[test]
fn crlf_lines_read_without_the_carriage_return() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", format!("{U1}\r\n{A1}\r\n").as_bytes());
    let run = dev.evi(&["sessions", "show", "S1"]);
    assert_eq!(
        run.stdout,
        "session S1 (2 messages, 1 branch, 2026-06-08 21:14 → 2026-06-08 21:14)\n\
         \n#1 user  2026-06-08 21:14:00\nhello\n\
         \n#2 assistant  2026-06-08 21:14:01\nhi\n"
    );
    // The carriage return is part of the raw bytes: the ids differ from LF's.
    let json = dev.evi(&["sessions", "export", "S1", "-f", "json"]).stdout;
    assert!(
        json.contains("\"id\":\"89c847b7e9bb1119b7e02425a55c05d5\""),
        "{json}"
    );
}

#[test]
fn identical_consecutive_lines_are_two_entries() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", &lines(&[U1, U1]));
    let run = dev.evi(&["sessions", "list", ALL[0], ALL[1], "--json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["sessions"][0]["messages"], 2);
    assert_eq!(v["sessions"][0]["branches"], 1);
}

const TREE: [&str; 4] = [
    r#"{"id":"01J0000000000000000000000A","parentId":null,"role":"user","content":"q","ts":"2026-06-08T10:00:00Z"}"#,
    r#"{"id":"01J0000000000000000000000B","parentId":"01J0000000000000000000000A","role":"assistant","content":"a","ts":"2026-06-08T10:00:01Z"}"#,
    r#"{"id":"01J0000000000000000000000C","parentId":"01J0000000000000000000000A","role":"assistant","content":"a, another branch","ts":"2026-06-08T10:05:00Z"}"#,
    r#"{"id":"01J0000000000000000000000D","parentId":"01J0000000000000000000000B","role":"user","content":"more on the first","ts":"2026-06-08T10:01:00Z"}"#,
];

#[test]
fn explicit_tree_shows_newest_branch_and_names_the_other() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", &lines(&TREE));
    let run = dev.evi(&["sessions", "show", "S1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "session S1 (2 messages, 2 branches, 2026-06-08 10:00 → 2026-06-08 10:05)\n\
         \n#1 user  2026-06-08 10:00:00\nq\n\
         \n#2 assistant  2026-06-08 10:05:00\na, another branch\n\
         \nother branches (1):\n  forks after #1 (01J00000): 2 messages, leaf 01J00000: more on the first\n"
    );
    let list = dev.evi(&["sessions", "list", ALL[0], ALL[1]]);
    assert_eq!(
        list.stdout,
        "ID  START             END                MSGS   BR  FIRST MESSAGE\n\
         S1  2026-06-08 10:00  2026-06-08 10:05      2    2  q\n"
    );
}
