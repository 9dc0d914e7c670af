//! A server that lies: every way it could alter what `evi sync pull`
//! receives is refused with an error naming the problem. A record that
//! does not verify is never applied, not even in part: pull writes nothing
//! of it, applies every other record, remembers it as damaged and fetches
//! it again until it verifies (issue 20, defect 3). A blob that does not
//! match its name refuses the whole page: nothing is written (transcripts
//! and checkpoints byte-identical, cursor unmoved).

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use evi::sync::{Entry, Identity, SyncKeys};
use evi_shared::SessionId;
use serde_json::{Value, json};

use crate::common::{Device, TestServer, Tree};
use crate::sync_proxy::Proxy;

const DAY: &str = "2026-06-09";

fn line(content: &str) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{content}\",\"ts\":\"2026-06-09T10:00:00Z\"}}\n")
}

/// A pusher and a victim on one account; the victim syncs through the
/// proxy, has pulled a first batch, and a second batch waits on the server.
struct Scene {
    _server: TestServer,
    pusher: Device,
    proxy: Proxy,
    victim: Device,
    identity: Identity,
    keys: SyncKeys,
    /// The records of the first batch, as the server serves them.
    first: Vec<Value>,
    before: (Tree, Tree),
    cursor: u64,
}

impl Scene {
    fn new() -> Self {
        let server = TestServer::start();
        let pusher = Device::new();
        pusher.write(DAY, "S1", (line("one") + &line("two")).as_bytes());
        pusher.write(DAY, "S2", line("other").as_bytes());
        pusher.init(&server, "alice", "pusher");
        pusher.sync_ok(&["push"]);
        let proxy = Proxy::start(&server.url);
        let victim = Device::new();
        victim.join_copying_key(&pusher, &proxy.url, "alice", "victim");
        victim.sync_ok(&["pull"]);
        let first = server.records(&pusher.token());
        assert_eq!(first.len(), 2);

        // Second batch: S1 continues, a new session S3, a journal with a blob.
        pusher.append(
            &format!("transcripts/{DAY}/S1.jsonl"),
            (line("three") + &line("four")).as_bytes(),
        );
        pusher.write(DAY, "S3", (line("new") + &line("session")).as_bytes());
        let blob = b"prior file contents\n";
        let sha = hex(&<sha2::Sha256 as sha2::Digest>::digest(blob));
        pusher.put(&format!("checkpoints/blobs/{sha}"), blob);
        pusher.put(
            "checkpoints/journal.jsonl",
            format!("{{\"seq\":1,\"ts\":\"2026-06-09T10:00:01Z\",\"path\":\"/a\",\"op\":\"write\",\"blob\":\"{sha}\",\"size\":20}}\n").as_bytes(),
        );
        pusher.sync_ok(&["push"]);

        let identity = Identity::load(&victim.identity_path()).unwrap();
        let keys = SyncKeys::derive(&identity);
        let before = (victim.tree("transcripts"), victim.tree("checkpoints"));
        let cursor = victim.state()["cursor"].as_u64().unwrap();
        assert_eq!(cursor, 2);
        Scene {
            _server: server,
            pusher,
            proxy,
            victim,
            identity,
            keys,
            first,
            before,
            cursor,
        }
    }

    fn stream(&self, session: &str) -> String {
        let s: SessionId = session.parse().unwrap();
        self.keys.session_key(&s).as_str().to_owned()
    }

    /// `evi sync pull` fails naming the problem and the records refused;
    /// it writes nothing of `sessions` (those the tampered records hold),
    /// all the rest, and moves its cursor on; with the proxy honest again,
    /// the next pull fetches the refused records again and brings them.
    fn assert_records_refused(&self, expect: &str, sessions: &[&str]) {
        let run = self.victim.sync(&["sync", "pull"]);
        assert_eq!(
            run.code, 1,
            "pull should fail: {} {}",
            run.stdout, run.stderr
        );
        assert!(
            run.stderr.contains(expect) && run.stderr.contains("damaged: "),
            "error should say {expect:?} and name the record: {}",
            run.stderr
        );
        let now = self.victim.tree("transcripts");
        let whole = self.pusher.tree("transcripts");
        let paths: std::collections::BTreeSet<&String> =
            whole.keys().chain(self.before.0.keys()).collect();
        for path in paths {
            let tampered = sessions
                .iter()
                .any(|s| path.ends_with(&format!("/{s}.jsonl")));
            let want = if tampered { &self.before.0 } else { &whole };
            assert_eq!(
                now.get(path),
                want.get(path),
                "{path} (tampered: {tampered})"
            );
        }
        let state = self.victim.state();
        assert!(state["cursor"].as_u64().unwrap() > self.cursor, "{state}");
        assert!(
            !state["damaged"].as_array().is_none_or(Vec::is_empty),
            "{state}"
        );
        self.proxy.clear();
        self.victim.sync_ok(&["pull"]);
        assert!(self.victim.tree("transcripts") == whole, "all there now");
        assert_eq!(self.victim.state().get("damaged"), None);
    }

    /// `evi sync pull` fails naming the problem and writes nothing; with
    /// the proxy honest again, the same pull succeeds.
    fn assert_refused(&self, expect: &str) {
        let run = self.victim.sync(&["sync", "pull"]);
        assert_eq!(
            run.code, 1,
            "pull should fail: {} {}",
            run.stdout, run.stderr
        );
        assert!(
            run.stderr.contains(expect),
            "error should say {expect:?}: {}",
            run.stderr
        );
        assert!(
            self.victim.tree("transcripts") == self.before.0,
            "transcripts changed"
        );
        // Every file as it was; the only folder a refused pull may leave is
        // the (empty) blob folder its verifying download was staged in.
        let after = self.victim.tree("checkpoints");
        let files = |t: &Tree| {
            t.iter()
                .filter(|(_, v)| v.is_some())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            files(&after),
            files(&self.before.1),
            "checkpoint files changed"
        );
        for (dir, _) in after.iter().filter(|(_, v)| v.is_none()) {
            assert!(
                self.before.1.contains_key(dir) || dir == "blobs",
                "new folder checkpoints/{dir}"
            );
        }
        assert_eq!(self.victim.state()["cursor"].as_u64(), Some(self.cursor));
        self.proxy.clear();
        let ok = self.victim.sync_ok(&["pull"]);
        assert_eq!(
            ok,
            "pulled 4 entries in 2 sessions, 1 blobs; 0 sessions diverged (both branches kept)\n"
        );
    }

    /// The victim's public recipient, as anyone who saw it could have it.
    fn recipient(&self) -> age::x25519::Recipient {
        let text = std::fs::read_to_string(self.victim.identity_path()).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("# public key: "))
            .expect("public key line");
        line.parse().unwrap()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn records(page: &mut Value) -> &mut Vec<Value> {
    page["records"].as_array_mut().unwrap()
}

fn find<'a>(page: &'a mut Value, stream: &str) -> &'a mut Value {
    records(page)
        .iter_mut()
        .find(|r| r["stream"] == stream)
        .expect("record of that stream")
}

fn ciphertext(r: &Value) -> Vec<u8> {
    B64.decode(r["ciphertext"].as_str().unwrap()).unwrap()
}

fn age_encrypt(to: &age::x25519::Recipient, plain: &[u8]) -> Vec<u8> {
    let enc = age::Encryptor::with_recipients(std::iter::once(to as &dyn age::Recipient)).unwrap();
    let mut w = enc.wrap_output(Vec::new()).unwrap();
    w.write_all(plain).unwrap();
    w.finish().unwrap()
}

#[test]
fn flipped_bit_is_refused() {
    let s = Scene::new();
    let s3 = s.stream("S3");
    s.proxy.on_records(move |page| {
        let r = find(page, &s3);
        let mut ct = ciphertext(r);
        let at = ct.len() / 2;
        ct[at] ^= 0x10;
        r["ciphertext"] = json!(B64.encode(ct));
    });
    s.assert_records_refused("does not decrypt with this identity", &["S3"]);
}

#[test]
fn segment_under_another_stream_is_refused() {
    let s = Scene::new();
    let (s1, s3) = (s.stream("S1"), s.stream("S3"));
    s.proxy.on_records(move |page| {
        find(page, &s1)["stream"] = json!("swap");
        find(page, &s3)["stream"] = json!(s1);
        find(page, "swap")["stream"] = json!(s3);
    });
    s.assert_records_refused("served under stream id", &["S1", "S3"]);
}

#[test]
fn replayed_segment_is_refused() {
    let s = Scene::new();
    let s1 = s.stream("S1");
    // S1's first segment, already pulled, served again as S1's next one.
    let old = s.first.iter().find(|r| r["stream"] == s1).unwrap().clone();
    s.proxy.on_records(move |page| {
        let r = find(page, &s1);
        assert_ne!(r["entry_ids"], old["entry_ids"]);
        r["ciphertext"] = old["ciphertext"].clone();
    });
    s.assert_records_refused("the server swapped or replayed it", &["S1"]);
}

#[test]
fn segment_without_the_mac_key_is_refused() {
    let s = Scene::new();
    // Someone with only the public recipient: a well-formed segment, MAC'd
    // under their own key, encrypted to the victim.
    let forger = Identity::generate();
    let sealed = evi::sync::seal(
        &SyncKeys::derive(&forger),
        &forger,
        &"S3".parse().unwrap(),
        &[Entry {
            id: "forged".into(),
            parent: None,
            day: DAY.parse().unwrap(),
            line: line("injected").trim_end().as_bytes().to_vec(),
            line_blob: None,
        }],
    )
    .unwrap();
    let mut inner = Vec::new();
    age::Decryptor::new(&sealed.ciphertext[..])
        .unwrap()
        .decrypt(std::iter::once(forger.age_identity() as &dyn age::Identity))
        .unwrap()
        .read_to_end(&mut inner)
        .unwrap();
    let forged = B64.encode(age_encrypt(&s.recipient(), &inner));
    let s3 = s.stream("S3");
    s.proxy.on_records(move |page| {
        find(page, &s3)["ciphertext"] = json!(forged);
    });
    s.assert_records_refused("segment MAC does not verify", &["S3"]);
}

#[test]
fn blob_not_matching_its_name_is_refused() {
    let s = Scene::new();
    let other = age_encrypt(&s.recipient(), b"something else entirely\n");
    s.proxy.on_blob(move |_, _| other.clone());
    s.assert_refused("blob content does not match its name");
}

/// A record the server adds: sealed with the victim's own keys (a stolen
/// identity, or a bug on another device), holding unsafe names.
fn inject(s: &Scene, session: &str, day: &str) {
    let sealed = evi::sync::seal::segment::seal_unchecked_for_tests(
        &s.keys,
        &s.identity,
        session,
        &[("e1", None, day, line("escape").trim_end().as_bytes())],
    )
    .unwrap();
    let rec = json!({
        "seq": 99,
        "stream": sealed.stream.as_str(),
        "kind": "entries",
        "entry_ids": sealed.entry_ids.iter().map(|i| i.as_str()).collect::<Vec<_>>(),
        "ciphertext": B64.encode(&sealed.ciphertext),
    });
    s.proxy.on_records(move |page| {
        if !records(page).is_empty() {
            records(page).push(rec.clone());
        }
    });
}

#[test]
fn session_id_climbing_out_is_refused() {
    let s = Scene::new();
    inject(&s, "../../x", DAY);
    s.assert_records_refused("bad session id", &[]);
    assert!(!s.victim.dir.path().join("x.jsonl").exists());
}

#[test]
fn impossible_day_is_refused() {
    let s = Scene::new();
    inject(&s, "S1", "2026-13-99");
    s.assert_records_refused("bad day", &[]);
}
