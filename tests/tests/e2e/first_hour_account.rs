//! Issue 9, account setup and the key: logging in again after a revoke, a
//! failed `init` that leaves nothing behind, key-mismatch messages that say
//! which file to move, and what `key import|export` refuse. Each test checks
//! what the user reads (stdout, stderr) and the exit code.

use crate::common::{Device, Run, TestServer, held};

fn login(dev: &Device, url: &str, user: &str, extra: &[&str]) -> Run {
    let mut args = vec!["sync", "login", "--server", url, "--user", user];
    args.extend_from_slice(extra);
    dev.sync(&args)
}

/// `evi sync init`, succeeding; the key fingerprint it prints.
fn init(dev: &Device, url: &str, user: &str, device: &str) -> String {
    let r = dev.sync(&[
        "sync", "init", "--server", url, "--user", user, "--device", device,
    ]);
    assert_eq!(r.code, 0, "init: {}", r.stderr);
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix("key fingerprint "))
        .expect("a fingerprint line")
        .to_owned()
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn line(content: &str) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{content}\",\"ts\":\"2026-06-08T10:00:00Z\"}}\n")
}

/// A port nothing listens on.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

#[test]
fn login_after_a_revoke_logs_in_again_keeping_the_key_and_the_state() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    let fp = init(&a, &server.url, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");

    a.write("2026-06-08", "S1", line("from a").as_bytes());
    a.sync_ok(&["push"]);
    b.sync_ok(&["pull"]);
    // b's own session and journal, pushed after its last pull: the records
    // after its cursor are its own.
    b.write("2026-06-08", "S2", line("from b").as_bytes());
    b.put(
        "checkpoints/journal.jsonl",
        b"{\"seq\":1,\"ts\":\"2026-06-08T10:00:00Z\",\"path\":\"/x\",\"op\":\"write\"}\n",
    );
    b.sync_ok(&["push"]);
    let state_before = b.state();
    let key_before = std::fs::read(b.identity_path()).unwrap();
    let token_before = b.token();

    let r = a.sync(&["sync", "revoke", "desktop"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = b.sync(&["sync", "pull"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`evi sync login`"), "{}", r.stderr);

    // As the hint says: the server and user are the ones configured.
    let r = b.sync(&["sync", "login"]);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            format!(
                "logged in again: pat on {} as device desktop (key {fp}); what this device \
                 synced before is kept\n",
                server.url
            )
            .as_str(),
            ""
        )
    );
    // A new token, the same key, the same state but for the device id.
    assert_ne!(b.token(), token_before);
    assert_eq!(std::fs::read(b.identity_path()).unwrap(), key_before);
    let state_after = b.state();
    for field in ["cursor", "files", "journal", "skip", "missing_blobs"] {
        assert_eq!(state_after[field], state_before[field], "{field}");
    }
    let (old, new) = (&state_before["account"], &state_after["account"]);
    for field in ["server", "user", "device"] {
        assert_eq!(new[field], old[field], "{field}");
    }
    assert_ne!(new["device_id"], old["device_id"]);
    assert_eq!(
        new["earlier_device_ids"],
        serde_json::json!([old["device_id"]])
    );

    // It syncs again, and nothing goes or comes twice: its own records
    // after its cursor are passed over, its session and journal are not
    // pushed again under the new device id.
    let pull = json(&b.sync_ok(&["pull", "--json"]));
    assert_eq!(pull["records"], 0, "{pull}");
    let push = json(&b.sync_ok(&["push", "--json"]));
    for field in ["entries", "journal_lines", "segments_stored"] {
        assert_eq!(push[field], 0, "{field}: {push}");
    }
    a.append(
        "transcripts/2026-06-08/S1.jsonl",
        line("more from a").as_bytes(),
    );
    a.sync_ok(&["push"]);
    let pull = json(&b.sync_ok(&["pull", "--json"]));
    assert_eq!(pull["records"], 1, "{pull}");
    b.append(
        "transcripts/2026-06-08/S2.jsonl",
        line("more from b").as_bytes(),
    );
    b.sync_ok(&["push"]);
    let pull = json(&a.sync_ok(&["pull", "--json"]));
    assert_eq!(pull["records"], 3, "b's two of S2 and its journal: {pull}");
    assert_eq!(held(&b, "S1").len(), 2);
    assert_eq!(held(&a, "S2").len(), 2);
    let journals: Vec<_> = std::fs::read_dir(a.home().join("checkpoints/devices"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(journals.len(), 1, "one journal of b on a: {journals:?}");

    // The account lists laptop and the desktop as it is now.
    let devices = json(&a.sync_ok(&["devices", "--json"]));
    let mut names: Vec<&str> = devices["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["desktop", "laptop"]);
}

#[test]
fn login_in_a_home_set_up_for_another_account_says_what_is_configured() {
    let server = TestServer::start();
    let a = Device::new();
    init(&a, &server.url, "pat", "laptop");
    let r = login(&a, &server.url, "sam", &[]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        format!(
            "error: this eVi home syncs as pat on {url} (device laptop), not as sam on {url}\n\
             hint: to log this device in again: evi sync login --server {url} --user pat\n\
             hint: to sync with another account, use another EVI_HOME (the sync folder here \
             holds the key of pat's account)\n",
            url = server.url
        )
    );
    let other = closed_port();
    let r = login(&a, &other, "pat", &[]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.starts_with(&format!(
            "error: this eVi home syncs as pat on {} (device laptop), not as pat on {other}\n",
            server.url
        )),
        "{}",
        r.stderr
    );
    // `init` again names the way back, too.
    let r = a.sync(&["sync", "init", "--server", &server.url, "--user", "pat"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "error: this eVi home already syncs as pat on {url} (device laptop)\n\
             hint: to log this device in again (after a revoke, say): evi sync login --server \
             {url} --user pat\n\
             hint: to create another account, use another EVI_HOME\n",
            url = server.url
        )
    );
}

#[test]
fn a_failed_init_leaves_no_key_and_a_second_init_works() {
    let server = TestServer::start();
    let first = Device::new();
    init(&first, &server.url, "pat", "laptop");
    let dev = Device::new();
    let init_args = |url: &str, user: &str| {
        let mut c = dev.sync_cmd();
        c.env("EVI_SYNC_RETRIES", "1").args([
            "sync", "init", "--server", url, "--user", user, "--device", "box",
        ]);
        c
    };
    let run = |mut c: std::process::Command| Run::from(c.output().unwrap());

    // The server is down.
    let down = closed_port();
    let r = run(init_args(&down, "sam"));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
    assert!(r.stderr.contains(&down), "{}", r.stderr);
    assert!(
        r.stderr.ends_with(
            "hint: nothing was written on this device: run `evi sync init` again once that is \
             fixed\n"
        ),
        "{}",
        r.stderr
    );
    assert!(!dev.identity_path().exists());

    // A password the server would refuse.
    let mut c = init_args(&server.url, "sam");
    c.env("EVI_SYNC_PASSWORD", "short");
    let r = run(c);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "error: the password is too short: evi-server needs at least 8 characters\n\
         hint: choose a longer one (EVI_SYNC_PASSWORD, --password-stdin or the prompt)\n"
    );
    assert!(!dev.identity_path().exists());

    // A user name that is taken.
    let r = run(init_args(&server.url, "pat"));
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "error: the account pat already exists on {url}\n\
             hint: to add this device to it: `evi sync pair` on your first device, `evi sync \
             join CODE --server {url}` here (offline: `evi sync key export -o key.age` there, \
             `evi sync key import key.age` here, then `evi sync login --server {url} --user \
             pat`)\n\
             hint: to create a new account, choose another --user\n",
            url = server.url
        )
    );
    assert!(!dev.identity_path().exists());

    // Nothing stands in the way of the next try.
    let r = run(init_args(&server.url, "sam"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stderr, "");
    assert!(r.stdout.starts_with(&format!(
        "sync set up: sam on {} as device box\n",
        server.url
    )));
    // The join command to type on the next device names this server.
    assert!(
        r.stdout.contains(&format!(
            "add another device: `evi sync pair` here, `evi sync join CODE --server {}` there;",
            server.url
        )),
        "{}",
        r.stdout
    );
    assert!(dev.identity_path().exists());
}

#[test]
fn key_mismatch_messages_say_which_file_to_move_and_how_to_get_the_right_key() {
    let server = TestServer::start();
    let a = Device::new();
    init(&a, &server.url, "pat", "laptop");
    // A home holding a key of its own (another account's).
    let other = Device::new();
    init(&other, &server.url, "sam", "box");
    let dev = Device::new();
    std::fs::create_dir_all(dev.identity_path().parent().unwrap()).unwrap();
    std::fs::copy(other.identity_path(), dev.identity_path()).unwrap();
    let path = dev.identity_path();
    let unused = path.with_file_name("identity.unused.txt");
    let fingerprint = |d: &Device| {
        let r = d.sync(&[
            "sync",
            "key",
            "export",
            "-o",
            d.dir.path().join("k.age").to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stderr.split_whitespace().nth(1).unwrap().to_owned()
    };
    let fp_here = fingerprint(&other);

    let r = login(&dev, &server.url, "pat", &["--device", "intruder"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "error: the key in {path} (fingerprint {fp_here}) is not the key of pat's account on \
             {url}\n\
             hint: move it away: mv {path} {unused}\n\
             hint: then bring the account's key: `evi sync pair` on your first device, `evi \
             sync join CODE --server {url}` here (offline: `evi sync key export -o key.age` there, \
             `evi sync key import key.age` here, and log in again)\n",
            path = path.display(),
            unused = unused.display(),
            url = server.url
        )
    );

    // `key import` of the account's key over it.
    let key = a.dir.path().join("k.age");
    let fp_a = fingerprint(&a);
    let r = dev.sync(&["sync", "key", "import", key.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "error: this device already has another key ({fp_here}) in {path}; it is never \
             overwritten\n\
             hint: if {key} (key {fp_a}) is the right one, move the key here away first: mv \
             {path} {unused}\n\
             hint: then run `evi sync key import {key}` again\n",
            path = path.display(),
            unused = unused.display(),
            key = key.display()
        )
    );
    // Following the hints works.
    std::fs::rename(&path, &unused).unwrap();
    let r = dev.sync(&["sync", "key", "import", key.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = login(&dev, &server.url, "pat", &["--device", "box"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn an_empty_key_passphrase_is_refused() {
    let server = TestServer::start();
    let a = Device::new();
    init(&a, &server.url, "pat", "laptop");
    let out = a.dir.path().join("key.age");
    let input = a.dir.path().join("exported.age");
    std::fs::write(&input, "an exported key would be here\n").unwrap();
    for args in [
        vec!["sync", "key", "export", "-o", out.to_str().unwrap()],
        vec!["sync", "key", "export"],
        vec!["sync", "key", "import", input.to_str().unwrap()],
    ] {
        let r: Run = a
            .sync_cmd()
            .env("EVI_KEY_PASSPHRASE", "")
            .args(&args)
            .output()
            .unwrap()
            .into();
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (
                2,
                "",
                "error: the key passphrase must not be empty: an empty one would leave the key \
                 unprotected (EVI_KEY_PASSPHRASE is empty)\n\
                 hint: set EVI_KEY_PASSPHRASE to the passphrase, or unset it to be asked\n"
            ),
            "{args:?}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn key_commands_help_names_the_passphrase_variable() {
    let dev = Device::new();
    let r = dev.evi(&["sync", "key", "--help"]);
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains(
            "  export  Write the key, protected by a passphrase (EVI_KEY_PASSPHRASE or a prompt), \
             to a file or stdout\n  import  Store an exported key on this device (its \
             passphrase from EVI_KEY_PASSPHRASE or a prompt)\n"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(
            "The passphrase comes from EVI_KEY_PASSPHRASE, else a prompt; a new one (export) needs at \
             least 8 characters.\n"
        ),
        "{}",
        r.stdout
    );
    for sub in ["export", "import"] {
        let r = dev.evi(&["sync", "key", sub, "--help"]);
        assert_eq!(r.code, 0);
        assert!(
            r.stdout
                .contains("\n\nThe passphrase comes from EVI_KEY_PASSPHRASE, else a prompt"),
            "{sub}: {}",
            r.stdout
        );
    }
}

#[test]
fn key_import_of_a_garbage_file_and_a_damaged_key_say_what_to_do() {
    let server = TestServer::start();
    let a = Device::new();
    let fp = init(&a, &server.url, "pat", "laptop");
    let garbage = a.dir.path().join("notes.txt");
    std::fs::write(&garbage, "hello\n").unwrap();
    let r = a.sync(&["sync", "key", "import", garbage.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "error: {} is not an exported evi key (expected an age file)\n\
             hint: on the device that has the key run `evi sync key export -o key.age`, and \
             import that file\n",
            garbage.display()
        )
    );

    // A damaged key: the message as before, and the way out.
    let backup = a.dir.path().join("key.age");
    a.sync_ok(&["key", "export", "-o", backup.to_str().unwrap()]);
    let path = a.identity_path();
    std::fs::write(&path, "AGE-SECRET-KEY-1DAMAGED\n").unwrap();
    let r = a.sync(&["sync", "key", "export"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "");
    let (message, hint) = r.stderr.split_once("\nhint: ").expect("a hint");
    assert!(
        message.starts_with(&format!(
            "error: not an age identity file: {}: bad AGE-SECRET-KEY-1 line: ",
            path.display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(hint, "import your key backup: evi sync key import FILE\n");
    // The same way out wherever the key is loaded.
    for cmd in ["push", "pull", "status"] {
        let r = a.sync(&["sync", cmd]);
        assert_eq!(r.code, 1, "{cmd}");
        assert!(
            r.stderr
                .ends_with("\nhint: import your key backup: evi sync key import FILE\n"),
            "{cmd}: {}",
            r.stderr
        );
    }

    let r = a.sync(&["sync", "key", "import", backup.to_str().unwrap()]);
    let aside = path.with_file_name("identity.damaged.txt");
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            "",
            format!(
                "moved the damaged key file {} to {}\nkey {fp} imported; now run `evi sync login`\n",
                path.display(),
                aside.display()
            )
            .as_str()
        ),
        "messages go to stderr, stdout is for data"
    );
    assert_eq!(std::fs::read(&aside).unwrap(), b"AGE-SECRET-KEY-1DAMAGED\n");
    a.sync_ok(&["push"]);
}

#[test]
fn login_again_with_a_live_token_changes_nothing() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    let fp = init(&a, &server.url, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    let (token, state) = (b.token(), b.state());
    let r = b.sync(&["sync", "login"]);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            format!(
                "already logged in: pat on {} as device desktop (key {fp}); nothing to do\n",
                server.url
            )
            .as_str(),
            ""
        )
    );
    assert_eq!((b.token(), b.state()), (token, state));
    let devices = json(&b.sync_ok(&["devices", "--json"]));
    assert_eq!(devices["devices"].as_array().unwrap().len(), 2, "{devices}");
}

#[test]
fn login_without_an_account_in_a_new_home_asks_for_one() {
    let dev = Device::new();
    let r = dev.sync(&["sync", "login", "--user", "pat"]);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            "error: this eVi home is not set up for sync yet: name the account\n\
             hint: evi sync login --server URL --user NAME\n"
        )
    );
}

#[test]
fn push_with_a_key_that_is_not_the_accounts_says_which_file_to_move() {
    let server = TestServer::start();
    let a = Device::new();
    let other = Device::new();
    init(&a, &server.url, "pat", "laptop");
    init(&other, &server.url, "sam", "laptop");
    // A's key swapped for another account's, its token still valid.
    std::fs::copy(other.identity_path(), a.identity_path()).unwrap();
    let r = a.sync(&["sync", "push"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        "error: this device's key does not match the account's: it was not made from the same \
         identity\n\
         hint: move sync/identity.txt (in the eVi home) away, then pair this device: \
         `evi sync pair` on your first device, `evi sync join CODE --server URL` here \
         (offline: `evi sync key export -o key.age` there, `evi sync key import key.age` here)\n"
    );
}

#[test]
fn pull_with_a_key_that_is_not_the_accounts_says_so_and_marks_nothing_damaged() {
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    let other = Device::new();
    init(&a, &server.url, "pat", "laptop");
    b.join_copying_key(&a, &server.url, "pat", "desktop");
    init(&other, &server.url, "sam", "laptop");
    b.write("2026-06-08", "S1", line("from the desktop").as_bytes());
    b.sync_ok(&["push"]);
    // A's key swapped for another account's (a valid age identity), its
    // token still valid: nothing it pulls can open.
    let own = std::fs::read(a.identity_path()).unwrap();
    std::fs::copy(other.identity_path(), a.identity_path()).unwrap();
    // What sync/ holds, less what any sync command leaves (the lock's pid,
    // the empty marks file it opens).
    let sync_state = || {
        let mut t = a.tree("sync");
        t.retain(|rel, _| rel != "lock" && rel != "appending");
        t
    };
    let sync_before = sync_state();
    let mismatch = "error: this device's key does not match the account's: it was not made \
                    from the same identity\n\
                    hint: move sync/identity.txt (in the eVi home) away, then pair this device: \
                    `evi sync pair` on your first device, `evi sync join CODE --server URL` here \
                    (offline: `evi sync key export -o key.age` there, `evi sync key import \
                    key.age` here)\n";
    for args in [
        &["sync", "pull"][..],
        &["sync", "pull", "--json"],
        &["sync", "pull", "--session", "S1"],
        &["sync", "verify", "--repair"],
    ] {
        let r = a.sync(args);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (1, "", mismatch),
            "{args:?}"
        );
    }
    assert!(sync_state() == sync_before, "nothing recorded as damaged");
    assert!(a.tree("transcripts").is_empty(), "nothing applied");
    // The right key back: everything opens, nothing was reported damaged.
    std::fs::write(a.identity_path(), own).unwrap();
    let out = a.sync_ok(&["pull"]);
    assert!(out.starts_with("pulled 1 entries in 1 sessions"), "{out}");
    assert_eq!(held(&a, "S1").len(), 1);
    let (code, v) = {
        let r = a.sync(&["sync", "verify", "--json"]);
        (r.code, json(&r.stdout))
    };
    assert_eq!(code, 0, "{v}");
}
