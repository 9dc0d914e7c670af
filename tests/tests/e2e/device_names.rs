//! Device names are unique within an account: a second device logging in as
//! `laptop` becomes `laptop-2`, is told so on stderr, and syncs under it.

use std::os::unix::fs::PermissionsExt;

use crate::common::{Device, TestServer};

/// The names `evi sync devices --json` lists on `dev`, sorted.
fn device_names(dev: &Device) -> Vec<String> {
    crate::common::sorted_device_names(
        &serde_json::from_str(&dev.sync_ok(&["devices", "--json"])).unwrap(),
    )
}

#[test]
fn a_second_laptop_becomes_laptop_2_and_is_told_so() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");

    // `join_copying_key` without losing the login's stderr.
    let b = Device::new();
    let key = b.identity_path();
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::copy(a.identity_path(), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let login = b.sync(&[
        "sync",
        "login",
        "--server",
        &server.url,
        "--user",
        "pat",
        "--device",
        "laptop",
    ]);
    assert_eq!(login.code, 0, "sync login: {}", login.stderr);
    assert!(
        login
            .stderr
            .contains("another device of pat is already called laptop; this one is laptop-2"),
        "stderr: {}",
        login.stderr
    );
    assert!(
        login.stdout.contains("as device laptop-2"),
        "{}",
        login.stdout
    );

    let status = |d: &Device| -> serde_json::Value {
        serde_json::from_str(&d.sync_ok(&["status", "--json"])).unwrap()
    };
    assert_eq!(status(&b)["device"], "laptop-2");
    assert_eq!(status(&a)["device"], "laptop");

    assert_eq!(device_names(&a), ["laptop", "laptop-2"]);

    // The renamed device syncs as usual.
    b.write(
        &crate::common::today(),
        "s1",
        b"{\"role\":\"user\",\"content\":\"from laptop-2\"}\n",
    );
    b.sync_ok(&["push"]);
    a.sync_ok(&["pull"]);
    let got = std::fs::read_to_string(
        a.home()
            .join("transcripts")
            .join(crate::common::today())
            .join("s1.jsonl"),
    )
    .unwrap();
    assert!(got.contains("from laptop-2"), "{got}");
}

/// `evi sync devices` shows every device of the account, however few the
/// server sends a page (`--max-page-devices`).
#[test]
fn the_device_list_shows_every_device_across_the_servers_pages() {
    let server = TestServer::start_with(&["--max-page-devices", "1"]);
    let a = Device::new();
    a.init(&server, "many", "laptop");
    let others: Vec<Device> = ["desk", "box"]
        .iter()
        .map(|name| {
            let d = Device::new();
            d.join_copying_key(&a, &server.url, "many", name);
            d
        })
        .collect();
    assert_eq!(device_names(&a), ["box", "desk", "laptop"]);
    let table = others[0].sync_ok(&["devices"]);
    for name in ["box", "desk", "laptop"] {
        assert!(table.contains(name), "{table}");
    }
}
