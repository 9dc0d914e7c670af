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

#[test]
fn stray_folders_and_files_are_skipped_with_one_warning_each() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", &lines(&[U1]));
    let t = dev.home().join("transcripts");
    std::fs::create_dir_all(t.join("notes")).unwrap();
    std::fs::write(t.join("notes/x.jsonl"), "junk\n").unwrap();
    std::fs::write(t.join("2026-06-08/bad name.jsonl"), "junk\n").unwrap();
    std::fs::write(t.join("2026-06-08/.hidden.jsonl"), "junk\n").unwrap();
    let run = dev.evi(&["sessions", "list", ALL[0], ALL[1]]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout.lines().count(), 2, "{}", run.stdout);
    let mut warnings: Vec<&str> = run.stderr.lines().collect();
    warnings.sort();
    let t = t.display();
    assert_eq!(
        warnings,
        [
            format!(
                "warning: skipping {t}/2026-06-08/.hidden.jsonl: not a session file (<session id>.jsonl)"
            ),
            format!(
                "warning: skipping {t}/2026-06-08/bad name.jsonl: not a session file (<session id>.jsonl)"
            ),
            format!("warning: skipping {t}/notes: not a day folder (YYYY-MM-DD)"),
        ]
    );
    // Never touched.
    assert_eq!(
        std::fs::read_to_string(format!("{t}/notes/x.jsonl")).unwrap(),
        "junk\n"
    );
}

#[test]
fn unknown_and_ambiguous_ids_are_clear_errors() {
    let dev = Device::new();
    dev.write("2026-06-08", "abc1", &lines(&[U1]));
    dev.write("2026-06-08", "abc2", &lines(&[A1]));
    let run = dev.evi(&["sessions", "show", "zzz"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "error: no session matches `zzz`\n\
         hint: `evi sessions list --days 3650` shows the ids of every session\n"
    );
    let run = dev.evi(&["sessions", "export", "abc"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        "error: `abc` matches 2 sessions:\n  abc1\n  abc2\nhint: type more characters of the id\n"
    );
    // An unambiguous prefix is accepted.
    let run = dev.evi(&["sessions", "show", "abc2"]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.starts_with("session abc2 (1 messages"),
        "{}",
        run.stdout
    );
}

#[test]
fn empty_listings_say_why() {
    let dev = Device::new();
    let run = dev.evi(&["sessions", "list"]);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""));
    let home = dev.home();
    assert_eq!(
        run.stderr,
        format!(
            "warning: there is no eVi home at {} (EVI_HOME points to a folder that does not exist)\n",
            home.display()
        )
    );
    std::fs::create_dir_all(&home).unwrap();
    let run = dev.evi(&["sessions", "list"]);
    assert_eq!(
        run.stderr,
        format!(
            "no sessions: {}/transcripts does not exist (eVi has written no transcript in this home yet)\n",
            home.display()
        )
    );

    dev.write_config("[tools]\ntranscripts = false\n");
    let run = dev.evi(&["sessions", "list"]);
    assert_eq!(
        run.stderr,
        format!(
            "no sessions: transcripts are turned off (`[tools] transcripts = false` in {}/config.toml)\n",
            home.display()
        )
    );

    dev.write_config("[tools]\ntranscripts = true\n");
    dev.write("2020-01-01", "old", &lines(&[U1]));
    let run = dev.evi(&["sessions", "list", "--json"]);
    assert_eq!(run.stdout, "{\n  \"sessions\": []\n}\n");
    assert_eq!(
        run.stderr,
        "no sessions active in the last 7 days (1 older; try --days 3650)\n"
    );
}

#[test]
fn config_problems_are_named() {
    let dev = Device::new();
    dev.write("2026-06-08", "S1", &lines(&[U1]));
    dev.write_config("[tools]\ntranscripts = true\nsparkles = 1\n");
    let run = dev.evi(&["sessions", "list", ALL[0], ALL[1]]);
    assert_eq!(run.code, 0);
    let cfg = dev.home().join("config.toml");
    assert_eq!(
        run.stderr,
        format!(
            "warning: {}:3: unknown key `tools.sparkles` ignored\n",
            cfg.display()
        )
    );
    dev.write_config("[web]\nurl = \"http://x\"\n[tools]\ntranscripts = \"yes\"\n");
    let run = dev.evi(&["sessions", "list"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with(&format!(
            "error: {}:4: key `tools.transcripts`: invalid type",
            cfg.display()
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn list_is_newest_first_cut_to_width_and_limited() {
    let dev = Device::new();
    let long = format!(
        r#"{{"role":"user","content":"[ongoing goal: refactor] {}","ts":"2026-06-10T09:00:00Z"}}"#,
        "word ".repeat(40)
    );
    dev.write("2026-06-08", "older", &lines(&[U1]));
    dev.write("2026-06-10", "newer", &lines(&[&long]));
    let run = dev
        .cmd()
        .args(["sessions", "list", ALL[0], ALL[1]])
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    let out = String::from_utf8(run.stdout).unwrap();
    assert_eq!(
        out,
        "ID     START             END                MSGS   BR  FIRST MESSAGE\n\
         newer  2026-06-10 09:00  2026-06-10 09:00      1    1  word word word word word…\n\
         older  2026-06-08 21:14  2026-06-08 21:14      1    1  hello\n"
    );
    assert!(out.lines().all(|l| l.chars().count() <= 80));
    let run = dev.evi(&["sessions", "list", ALL[0], ALL[1], "--limit", "1"]);
    assert_eq!(run.stdout.lines().count(), 2);
    assert!(run.stdout.contains("newer"));
}

#[test]
fn export_formats_escape_and_never_clobber() {
    let dev = Device::new();
    let evil = r#"{"role":"user","content":"<script>alert(1)</script> & \"quotes\"","ts":"2026-06-08T21:14:00Z"}"#;
    dev.write("2026-06-08", "S1", &lines(&[evil, A1]));
    let md = dev.evi(&["sessions", "export", "S1"]);
    assert_eq!(md.code, 0);
    assert!(md.stdout.starts_with("# Session S1\n"), "{}", md.stdout);
    assert!(
        md.stdout
            .contains("## assistant · 2026-06-08 21:14:01\n\nhi\n")
    );

    let out = dev.dir.path().join("s1.html");
    let run = dev.evi(&[
        "sessions",
        "export",
        "S1",
        "-f",
        "html",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; \"quotes\""));
    assert!(!html.contains("<script>"));
    assert!(
        !html.contains("src=") && !html.contains("href="),
        "self-contained"
    );

    let again = dev.evi(&[
        "sessions",
        "export",
        "S1",
        "-f",
        "md",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        html,
        "not rewritten"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dev.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".evi-"))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left behind");

    let json = dev.evi(&["sessions", "export", "S1", "-f", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    assert_eq!(v["entries"][1]["parentId"], v["entries"][0]["id"]);
    assert_eq!(v["active_leaf"], v["entries"][1]["id"]);
}

#[test]
fn fork_copies_the_path_into_a_new_session() {
    let dev = Device::new();
    let original = lines(&TREE);
    let path = dev.write("2026-06-08", "S1", &original);
    let run = dev.evi(&[
        "sessions",
        "fork",
        "S1",
        "--at",
        "01J0000000000000000000000D",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let new_id = run
        .stdout
        .strip_prefix("forked S1 → new session ")
        .and_then(|r| r.strip_suffix(" (3 messages copied)\n"))
        .unwrap_or_else(|| panic!("unexpected output {:?}", run.stdout))
        .to_owned();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        original,
        "original untouched"
    );
    let forked = dev
        .home()
        .join("transcripts")
        .join(today())
        .join(format!("{new_id}.jsonl"));
    assert_eq!(
        std::fs::read(&forked).unwrap(),
        lines(&[TREE[0], TREE[1], TREE[3]]),
    );
    let show = dev.evi(&["sessions", "show", &new_id]);
    assert!(
        show.stdout.contains("(3 messages, 1 branch"),
        "{}",
        show.stdout
    );

    let bad = dev.evi(&["sessions", "fork", "S1", "--at", "nope"]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr
            .starts_with("error: session S1 has no entry `nope`"),
        "{}",
        bad.stderr
    );
}
