use super::*;
use crate::transcript::line::parse_head;

/// Made-up secrets in each rule's shape (random letters, never real keys).
pub(crate) fn examples() -> Vec<(&'static str, String)> {
    let alnum = |n: usize, seed: u64| -> String {
        let set = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                set[(x % set.len() as u64) as usize] as char
            })
            .collect()
    };
    let b32 = |n: usize, seed: u64| -> String {
        alnum(n, seed)
            .chars()
            .map(|c| match c {
                'a'..='z' => c.to_ascii_uppercase(),
                '0' | '1' | '8' | '9' => '7',
                c => c,
            })
            .collect()
    };
    vec![
        ("aws-access-token", format!("AKIA{}", b32(16, 1))),
        (
            "aws-secret-access-key",
            format!("aws_secret_access_key = {}/{}", alnum(20, 2), alnum(19, 3)),
        ),
        ("github-pat", format!("ghp_{}", alnum(36, 4))),
        ("github-oauth", format!("gho_{}", alnum(36, 5))),
        ("github-app-token", format!("ghs_{}", alnum(36, 6))),
        ("github-refresh-token", format!("ghr_{}", alnum(36, 7))),
        (
            "github-fine-grained-pat",
            format!("github_pat_{}", alnum(82, 8)),
        ),
        (
            "gitlab-pat-routable",
            format!("glpat-{}.01{}", alnum(30, 9), alnum(7, 10).to_lowercase()),
        ),
        ("gitlab-pat", format!("glpat-{}", alnum(20, 11))),
        (
            "openai-api-key",
            format!("sk-{}T3BlbkFJ{} ", alnum(20, 12), alnum(20, 13)),
        ),
        ("openai-project-key", format!("sk-proj-{}", alnum(120, 14))),
        (
            "anthropic-api-key",
            format!("sk-ant-api03-{}AA ", alnum(93, 16)),
        ),
        (
            "anthropic-admin-api-key",
            format!("sk-ant-admin01-{}AA ", alnum(93, 17)),
        ),
        ("anthropic-key", format!("sk-ant-oat01-{}", alnum(80, 18))),
        (
            "slack-bot-token",
            format!("xoxb-1234567890123-1234567890123-{}", alnum(24, 19)),
        ),
        (
            "slack-user-token",
            format!("xoxp-1234567890-1234567890-1234567890-{}", alnum(32, 20)),
        ),
        (
            "slack-app-token",
            format!(
                "xapp-1-A0{}-1234567890-{}",
                b32(8, 21),
                alnum(20, 22).to_lowercase()
            ),
        ),
        (
            "slack-legacy-bot-token",
            format!("xoxb-12345678-{}", alnum(24, 23)),
        ),
        (
            "slack-legacy-token",
            "xoxs-1234-5678-9012-0a1b2c3d4e5f".to_owned(),
        ),
        (
            "slack-legacy-workspace-token",
            format!("xoxa-2-{}", alnum(32, 24)),
        ),
        (
            "slack-webhook-url",
            format!(
                "https://hooks.slack.com/services/T0{}/B0{}/{}",
                b32(7, 25),
                b32(7, 26),
                alnum(24, 27)
            ),
        ),
        ("private-key", pem("RSA", 40)),
        (
            "private-key-tail",
            format!(
                "{}\n{}\n-----END PRIVATE KEY-----",
                alnum(64, 29),
                alnum(30, 30)
            ),
        ),
        (
            "jwt",
            format!(
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOi{}.{} ",
                alnum(30, 31),
                alnum(43, 32)
            ),
        ),
        (
            "url-password",
            "postgres://app:hunter2-Xq9@db.internal:5432/app".to_owned(),
        ),
    ]
}

/// A made-up PEM private key block.
pub(crate) fn pem(kind: &str, seed: u64) -> String {
    let mut body = String::new();
    let mut x = seed | 1;
    for _ in 0..6 {
        let line: String = (0..64)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                    [(x >> 58) as usize] as char
            })
            .collect();
        body.push_str(&line);
        body.push('\n');
    }
    format!("-----BEGIN {kind} PRIVATE KEY-----\n{body}-----END {kind} PRIVATE KEY-----")
}

fn all_rules() -> Redactor {
    Redactor::new(&rule_specs())
}

#[test]
fn the_rule_file_is_valid_and_each_rule_catches_its_example() {
    let specs = rule_specs();
    let mut ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), specs.len(), "rule ids are unique");
    let r = all_rules();
    let examples = examples();
    for s in &specs {
        assert!(!s.keywords.is_empty(), "{}: a keyword prefilter", s.id);
        assert!(!s.source.is_empty(), "{}: a source", s.id);
        let (_, secret) = examples
            .iter()
            .find(|(id, _)| *id == s.id)
            .unwrap_or_else(|| panic!("an example for {}", s.id));
        let line = format!("here: {secret}\n");
        let out = r
            .redact_line(line.as_bytes())
            .unwrap_or_else(|| panic!("{} caught", s.id));
        assert!(out.hits.contains_key(&s.id), "{}: {:?}", s.id, out.hits);
        let text = String::from_utf8(out.line).unwrap();
        assert!(text.contains(&format!("[REDACTED:{}]", s.id)), "{text}");
    }
}

#[test]
fn a_line_without_a_secret_is_left_alone() {
    let r = all_rules();
    assert_eq!(r.redact_line(br#"{"role":"user","content":"hello"}"#), None);
    assert_eq!(r.redact_line(b"not json, no secret"), None);
}

#[test]
fn json_strings_are_redacted_as_the_text_they_stand_for() {
    let r = Redactor::configured(true, &[]).unwrap().unwrap();
    let key = pem("OPENSSH", 7);
    let token = examples()[2].1.clone();
    // The key's newlines are `\n` escapes; the URL's slashes `\/`.
    let content = serde_json::to_string(&format!("key:\n{key}\nand {token} done")).unwrap();
    let hook =
        "https:\\/\\/hooks.slack.com\\/services\\/T0ABCDEFG\\/B0ABCDEFG\\/aZ3kQ9xLm2Np7Rt5Vw8Yb1Cd";
    let line = format!(
        r#"{{"role":"tool","tool_name":"bash","content":{content},"hook":"{hook}","n":1}}"#
    );
    let out = r.redact_line(line.as_bytes()).unwrap();
    let text = String::from_utf8(out.line.clone()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).expect("still JSON");
    assert_eq!(
        v["content"],
        "key:\n[REDACTED:private-key]\nand [REDACTED:github-pat] done"
    );
    assert_eq!(v["hook"], "[REDACTED:slack-webhook-url]");
    // Bytes outside the strings that changed are as they were.
    assert!(text.starts_with(r#"{"role":"tool","tool_name":"bash","content":"#));
    assert!(text.ends_with(r#","n":1}"#));
    for part in key
        .lines()
        .chain([token.as_str(), "aZ3kQ9xLm2Np7Rt5Vw8Yb1Cd"])
    {
        assert!(!text.contains(part), "{part} left in {text}");
    }
    assert_eq!(out.hits["private-key"], 1);
}

#[test]
fn a_key_split_over_two_lines_is_redacted_in_both() {
    let r = Redactor::configured(true, &[]).unwrap().unwrap();
    let key = pem("EC", 9);
    let (head, tail) = key.split_at(key.len() / 2);
    for half in [head, tail] {
        let line = serde_json::json!({"role": "tool", "content": half}).to_string();
        let out = r.redact_line(line.as_bytes()).expect("redacted");
        let text = String::from_utf8(out.line).unwrap();
        for part in half
            .lines()
            .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
        {
            assert!(!text.contains(part), "{part} left in {text}");
        }
    }
}

#[test]
fn a_line_that_is_not_json_is_redacted_as_bytes() {
    let r = Redactor::configured(true, &[]).unwrap().unwrap();
    let token = examples()[0].1.clone();
    let line = format!("\u{1}\u{ff}junk {token} end");
    let out = r.redact_line(line.as_bytes()).unwrap();
    assert_eq!(
        out.line,
        b"\x01\xc3\xbfjunk [REDACTED:aws-access-token] end"
    );
}

#[test]
fn placeholders_and_examples_are_not_secrets() {
    let r = Redactor::configured(true, &[]).unwrap().unwrap();
    for s in [
        "AKIAIOSFODNN7EXAMPLE",
        "mongodb://${DB_USER}:${DB_PASS}@mongo:27017/app",
        "amqp://guest:<password>@rabbit:5672/",
        "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    ] {
        assert_eq!(r.redact_line(s.as_bytes()), None, "{s}");
    }
}

#[test]
fn opt_in_rules_are_named_and_unknown_names_refused() {
    let on = Redactor::configured(true, &[]).unwrap().unwrap();
    assert!(!on.rule_ids().any(|id| id == "jwt"));
    let more = Redactor::configured(true, &["jwt".into()])
        .unwrap()
        .unwrap();
    assert!(more.rule_ids().any(|id| id == "jwt"));
    let e = Redactor::configured(true, &["no-such-rule".into()])
        .err()
        .unwrap();
    assert!(e.to_string().contains("no-such-rule"), "{e}");
    assert!(Redactor::configured(false, &[]).unwrap().is_none());
}

#[test]
fn a_redacted_line_carries_the_original_ids() {
    let r = Redactor::configured(true, &[]).unwrap().unwrap();
    let token = examples()[2].1.clone();
    let line = format!(r#"{{"role":"user","content":"{token}"}}"#);
    let red = r.redact_line(line.as_bytes()).unwrap();
    let out = carry(Agent::Evi, red.line, "0123abcd", Some("p1"));
    let head = parse_head(&out);
    assert_eq!(head.ids.id.as_deref(), Some("0123abcd"));
    assert_eq!(head.ids.parent, Some(Some("p1".to_owned())));
    assert_eq!(
        out,
        br#"{"id":"0123abcd","parentId":"p1","role":"user","content":"[REDACTED:github-pat]"}"#
    );
    // A root keeps `parentId: null`; a line that is not JSON is wrapped.
    let out = carry(Agent::Evi, b"x [REDACTED:jwt]".to_vec(), "e1", None);
    let head = parse_head(&out);
    assert_eq!(head.ids.id.as_deref(), Some("e1"));
    assert_eq!(head.ids.parent, Some(None));
    assert!(head.wrapped);
}

/// False positives per rule on the corpus of ordinary transcripts
/// (`bench/redact_corpus.py` writes it). The default rules must have none;
/// `cargo test --release -p evi redact::tests::corpus -- --nocapture`
/// prints the table docs/redaction.md shows.
#[test]
fn corpus() {
    let corpus = include_bytes!("../../testdata/redact-corpus.jsonl");
    let specs = rule_specs();
    let mut lines = 0;
    let mut table = Vec::new();
    for s in &specs {
        let r = Redactor::new(std::slice::from_ref(s));
        let mut hits = 0u64;
        let mut hit_lines = 0u64;
        let mut first = None;
        for line in corpus.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if let Some(out) = r.redact_line(line) {
                hits += out.hits.values().sum::<u64>();
                hit_lines += 1;
                first.get_or_insert_with(|| {
                    String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned()
                });
            }
        }
        lines = corpus
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        table.push((s.id.clone(), s.default, hits, hit_lines, first));
    }
    println!("corpus: {lines} lines, {} bytes", corpus.len());
    println!("| rule | on by default | false positives (secrets) | lines |");
    println!("| --- | --- | --- | --- |");
    for (id, default, hits, hit_lines, _) in &table {
        println!(
            "| `{id}` | {} | {hits} | {hit_lines} |",
            if *default { "yes" } else { "no" }
        );
    }
    // The rule file's defaults are what the measurement says: on exactly
    // when a rule has no false positive here.
    for (id, default, hits, _, first) in &table {
        assert!(
            !*default || *hits == 0,
            "default rule {id} has {hits} false positives on the corpus, e.g. {first:?}"
        );
        assert!(
            *default || *hits > 0,
            "rule {id} has no false positive on the corpus: make it a default, or add the \
             ordinary text that shows why it is not"
        );
    }
}
