//! Redaction before sealing: a session holding an AWS key, a GitHub token
//! and private keys in several shapes (inline, inside JSON strings with
//! `\n` and `\/` escapes, split over two tool output lines, in a line that
//! is not JSON) is pushed from A and pulled on B. No secret reaches the
//! server (its storage, and its records opened with `age -d`) or B; B shows
//! `[REDACTED:…]`; A's file is unchanged byte for byte; both devices hold
//! the same tree (entry ids and parents); a second push sends nothing.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use crate::common::{Device, TestServer, age_open, held, tool_present, two_devices};

const DAY: &str = "2026-06-09";
const SESSION: &str = "redact-session-1";

/// A made-up PEM block (random base64, never a real key) and its body lines.
fn pem(kind: &str, seed: u64) -> (String, Vec<String>) {
    let mut x = seed | 1;
    let body: Vec<String> = (0..8)
        .map(|_| {
            (0..64)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                        [(x >> 58) as usize] as char
                })
                .collect()
        })
        .collect();
    let block = format!(
        "-----BEGIN {kind} PRIVATE KEY-----\n{}\n-----END {kind} PRIVATE KEY-----\n",
        body.join("\n")
    );
    (block, body)
}

struct Secrets {
    /// Every string that must not leave A.
    needles: Vec<String>,
    /// The session file's bytes.
    file: Vec<u8>,
}

fn session_with_secrets() -> Secrets {
    let aws_id = "AKIAZ3QW7RT2LK5MN4XB";
    let aws_secret = "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";
    let gh = "ghp_7Hq2Lm9Xr4Tz8Kc1Vb5Nw3Jd6Fg0Sy2Pa4Ue";
    let (rsa, rsa_body) = pem("RSA", 11);
    let (ssh, ssh_body) = pem("OPENSSH", 23);
    let (split, split_body) = pem("EC", 37);
    let cut = split.find(&split_body[4]).unwrap();
    let (head, tail) = split.split_at(cut);
    let line = |v: serde_json::Value| format!("{v}\n");
    let mut file = String::new();
    // Inline in a user's message.
    file += &line(serde_json::json!({
        "role": "user", "ts": "2026-06-09T10:00:00Z",
        "content": format!(
            "deploy with AWS_ACCESS_KEY_ID={aws_id} AWS_SECRET_ACCESS_KEY={aws_secret} and push with {gh}"
        )
    }));
    // Tool output: a PEM block inside a JSON string (`\n` escapes).
    file += &line(serde_json::json!({
        "role": "tool", "tool_name": "bash", "ts": "2026-06-09T10:00:01Z",
        "content": format!("$ cat id_rsa\n{rsa}"),
    }));
    // `~/.aws/credentials` read by a tool.
    file += &line(serde_json::json!({
        "role": "tool", "tool_name": "read_file", "ts": "2026-06-09T10:00:02Z",
        "content": format!("[default]\naws_access_key_id = {aws_id}\naws_secret_access_key = {aws_secret}\n"),
    }));
    // A key split over two tool output lines.
    file += &line(serde_json::json!({
        "role": "tool", "tool_name": "bash", "ts": "2026-06-09T10:00:03Z", "content": head,
    }));
    file += &line(serde_json::json!({
        "role": "tool", "tool_name": "bash", "ts": "2026-06-09T10:00:04Z", "content": tail,
    }));
    // Escaped slashes around a token, and a key nested one JSON level down
    // (its newlines are `\\n` in the line).
    let nested = serde_json::json!({ "key": ssh }).to_string();
    file += &format!(
        "{{\"role\":\"assistant\",\"ts\":\"2026-06-09T10:00:05Z\",\"content\":\"cloning https:\\/\\/x-access-token:{gh}@github.com\\/o\\/r.git\",\"tool_calls\":[{{\"name\":\"write_file\",\"arguments\":{}}}]}}\n",
        serde_json::to_string(&nested).unwrap()
    );
    // A line that is not JSON.
    file += &format!("pasted: {gh} {aws_id}\n");
    // Ordinary lines after them, one naming its own id (its parent is the
    // line before it).
    file += &line(serde_json::json!({
        "role": "assistant", "ts": "2026-06-09T10:00:06Z", "content": "done: 3 files changed",
    }));
    file += &line(serde_json::json!({
        "id": "own-id-1", "role": "user", "ts": "2026-06-09T10:00:07Z",
        "content": format!("and once more {gh}"),
    }));
    let mut needles = vec![aws_id.to_owned(), aws_secret.to_owned(), gh.to_owned()];
    needles.extend(rsa_body);
    needles.extend(ssh_body);
    needles.extend(split_body);
    // Also as JSON would escape them, and as a base64 wrapper would not hide
    // them from a reader: the needles are checked in decoded lines too.
    Secrets {
        needles,
        file: file.into_bytes(),
    }
}

fn assert_none_in(bytes: &[u8], needles: &[String], what: &str) {
    for n in needles {
        assert!(
            !bytes.windows(n.len()).any(|w| w == n.as_bytes()),
            "{n:?} reached {what}"
        );
    }
}

/// Every record's plaintext, opened as a user would: `age -d`, `zstd -d`.
fn opened_records(server: &TestServer, a: &Device) -> Vec<Vec<u8>> {
    let records = server.records(&a.token());
    records
        .iter()
        .map(|r| {
            let ct = B64.decode(r["ciphertext"].as_str().unwrap()).unwrap();
            zstd::decode_all(&age_open(&a.identity_path(), &ct)[..]).unwrap()
        })
        .collect()
}

#[test]
fn secrets_are_replaced_before_they_leave_the_device() {
    let (server, a, b) = two_devices();
    let s = session_with_secrets();
    let path = a.write(DAY, SESSION, &s.file);

    let out = a.sync_ok(&["push"]);
    assert!(out.contains("pushed 9 entries"), "{out}");
    assert!(
        out.contains("redacted") && out.contains("aws-access-token") && out.contains("private-key"),
        "push says what it redacted: {out}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        s.file,
        "A's file is untouched"
    );

    // Nothing on the server: its files as stored, and every record opened.
    for (name, bytes) in server.stored() {
        if let Some(bytes) = bytes {
            assert_none_in(&bytes, &s.needles, &format!("the server's {name}"));
        }
    }
    if tool_present("age", "--version", "apt-get install age") {
        let plain = opened_records(&server, &a);
        assert!(!plain.is_empty());
        let all: Vec<u8> = plain.concat();
        assert_none_in(&all, &s.needles, "a record's plaintext");
        for rule in [
            "aws-access-token",
            "aws-secret-access-key",
            "github-pat",
            "private-key",
        ] {
            let tag = format!("[REDACTED:{rule}]");
            assert!(
                all.windows(tag.len()).any(|w| w == tag.as_bytes()),
                "{tag} in the sealed lines"
            );
        }
    }

    // Nothing on B, which shows the redacted text.
    b.sync_ok(&["pull"]);
    for (name, bytes) in b.tree("") {
        if let Some(bytes) = bytes {
            assert_none_in(&bytes, &s.needles, &format!("B's {name}"));
        }
    }
    // The wrapped non-JSON line, decoded, holds none either.
    for h in held(&b, SESSION) {
        assert_none_in(&h.content, &s.needles, "a line held on B");
    }
    let shown = b.evi(&["sessions", "show", SESSION]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains("[REDACTED:github-pat]"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("[REDACTED:private-key]"),
        "{}",
        shown.stdout
    );

    // One tree: the same entry ids and parents on both devices.
    let tree = |d: &Device| -> std::collections::BTreeSet<(String, Option<String>)> {
        held(d, SESSION)
            .into_iter()
            .map(|h| (h.id, h.parent))
            .collect()
    };
    assert_eq!(tree(&a).len(), 9);
    assert_eq!(tree(&a), tree(&b), "both devices hold the same tree");

    // A second push sends nothing; A's file is still as it was.
    let again = a.sync_ok(&["push"]);
    assert!(again.contains("pushed 0 entries"), "{again}");
    assert!(!again.contains("redacted"), "{again}");
    assert_eq!(std::fs::read(&path).unwrap(), s.file);
    // Nor does B's: what pull wrote is what push skips.
    let from_b = b.sync_ok(&["push"]);
    assert!(from_b.contains("pushed 0 entries"), "{from_b}");

    // Where, by rule, never what.
    let listed = a.evi(&["sessions", "show", "--redactions", SESSION]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains(&format!("{DAY}/{SESSION}.jsonl:1 ")),
        "{}",
        listed.stdout
    );
    assert!(listed.stdout.contains("github-pat ×1"), "{}", listed.stdout);
    assert_none_in(
        listed.stdout.as_bytes(),
        &s.needles,
        "the list of redactions",
    );
    let status: serde_json::Value =
        serde_json::from_str(&a.sync_ok(&["status", "--json"])).unwrap();
    assert_eq!(status["redact"], true);
    assert_eq!(status["redacted_lines"], 8, "{status}");
    assert_eq!(status["redactions"]["github-pat"], 4, "{status}");
    let record = a.home().join("sync/redactions.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&record).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_none_in(
        &std::fs::read(&record).unwrap(),
        &s.needles,
        "sync/redactions.json",
    );
}

#[test]
fn redaction_can_be_turned_off() {
    let (_server, a, b) = two_devices();
    a.write_config("[sync]\nredact = false\n");
    let gh = "ghp_7Hq2Lm9Xr4Tz8Kc1Vb5Nw3Jd6Fg0Sy2Pa4Ue";
    let line = format!("{{\"role\":\"user\",\"content\":\"{gh}\"}}\n");
    a.write(DAY, SESSION, line.as_bytes());
    let out = a.sync_ok(&["push"]);
    assert!(!out.contains("redacted"), "{out}");
    b.sync_ok(&["pull"]);
    let got = std::fs::read(b.home().join(format!("transcripts/{DAY}/{SESSION}.jsonl"))).unwrap();
    assert_eq!(got, line.as_bytes(), "sent as it is, verbatim");
    // A name that is no rule is refused, saying which are.
    a.write_config("[sync]\nredact_rules = [\"no-such-rule\"]\n");
    let r = a.sync(&["sync", "push"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("no-such-rule") && r.stderr.contains("github-pat"),
        "{}",
        r.stderr
    );
}

/// Other agents' lines are redacted as eVi's are: a Claude Code line (its
/// own `uuid`, so it keeps its id as it is) and a Codex line (a derived id:
/// it travels with `id`/`parentId`) holding secrets reach B without them,
/// with the same ids on both devices; A's files are untouched.
#[test]
fn secrets_in_claude_code_and_codex_sessions_are_replaced_before_they_leave_the_device() {
    use crate::agents::{
        CODEX_REL, append, claude_file, codex, enable, entries, next_user_line, project,
        write_fixture_sessions,
    };
    let (_server, a, b) = two_devices();
    let proj = project(&a, "home/a/proj");
    enable(&a, "");
    enable(&b, "");
    let (cc_a, cx_a) = write_fixture_sessions(&a, &proj);
    let gh = "ghp_7Hq2Lm9Xr4Tz8Kc1Vb5Nw3Jd6Fg0Sy2Pa4Ue";
    let aws_id = "AKIAZ3QW7RT2LK5MN4XB";
    append(&cc_a, &next_user_line(&proj, &format!("push with {gh}")));
    append(
        &cx_a,
        &format!(
            r#"{{"timestamp":"2026-01-19T15:22:00.000Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"deploy with AWS_ACCESS_KEY_ID={aws_id}"}}]}}}}"#
        ),
    );
    let before = (std::fs::read(&cc_a).unwrap(), std::fs::read(&cx_a).unwrap());
    let out = a.sync_ok(&["push"]);
    assert!(
        out.contains("redacted") && out.contains("github-pat") && out.contains("aws-access-token"),
        "{out}"
    );
    assert_eq!(
        (std::fs::read(&cc_a).unwrap(), std::fs::read(&cx_a).unwrap()),
        before,
        "A's files are untouched"
    );
    b.sync_ok(&["pull"]);
    let needles = [gh.to_owned(), aws_id.to_owned()];
    let (cc_b, cx_b) = (claude_file(&b, &proj), codex(&b).join(CODEX_REL));
    for (p, tag) in [
        (&cc_b, "[REDACTED:github-pat]"),
        (&cx_b, "[REDACTED:aws-access-token]"),
    ] {
        let text = std::fs::read(p).unwrap();
        assert_none_in(&text, &needles, &p.display().to_string());
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains(tag), "{text}");
    }
    let tree = |p: &std::path::Path| -> std::collections::BTreeSet<(String, Option<String>)> {
        entries(p)
            .into_iter()
            .map(|(id, parent, _)| (id, parent))
            .collect()
    };
    assert_eq!(tree(&cc_a), tree(&cc_b), "one tree");
    assert_eq!(tree(&cx_a), tree(&cx_b), "one tree");
    for d in [&a, &b] {
        let again = d.sync_ok(&["push"]);
        assert!(again.contains("pushed 0 entries"), "{again}");
    }
}
