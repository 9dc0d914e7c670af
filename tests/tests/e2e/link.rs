//! `evi link` (issue 14): the deep link of a session by its full id, and
//! `--open` handing it to the desktop's opener (a script standing in for
//! `xdg-open` here), or saying plainly that there is none.

use std::os::unix::fs::PermissionsExt;

use crate::common::{Device, Run};

const S: &str = "01JLINK0000000000000000000";
const TWIN: &str = "01JLINK0000000000000000001";

/// The opener `evi` looks for on this system.
const OPENER: &str = if cfg!(target_os = "macos") {
    "open"
} else {
    "xdg-open"
};

fn home() -> Device {
    let dev = Device::new();
    for id in [S, TWIN] {
        dev.write(
            "2026-06-08",
            id,
            b"{\"role\":\"user\",\"content\":\"hi\"}\n",
        );
    }
    dev
}

/// `evi link …` with only `bin` on PATH.
fn link_with_path(dev: &Device, bin: &std::path::Path, args: &[&str]) -> Run {
    dev.cmd()
        .env("PATH", bin)
        .arg("link")
        .args(args)
        .output()
        .unwrap()
        .into()
}

#[test]
fn link_prints_the_full_id_of_a_prefix() {
    let dev = home();
    let r = dev.evi(&["link", &S.to_lowercase()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("evi://session/{S}\n"));
    let r = dev.evi(&["link", "01JLINK"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("matches 2 sessions"), "{}", r.stderr);
    let r = dev.evi(&["link", "nope"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("no session matches `nope`"),
        "{}",
        r.stderr
    );
}

#[test]
fn open_hands_the_link_to_the_desktop_or_says_there_is_none() {
    let dev = home();
    let bin = dev.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let got = dev.dir.path().join("opened.txt");
    let opener = bin.join(OPENER);
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", got.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = link_with_path(&dev, &bin, &[S, "--open"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("evi://session/{S}\n"));
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        format!("evi://session/{S}\n")
    );

    // An opener that finds no handler for evi:// links.
    std::fs::write(&opener, "#!/bin/sh\nexit 4\n").unwrap();
    let r = link_with_path(&dev, &bin, &[S, "--open"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stdout,
        format!("evi://session/{S}\n"),
        "the link is still printed"
    );
    assert!(
        r.stderr
            .contains(&format!("`{OPENER}` could not open evi://session/{S}")),
        "{}",
        r.stderr
    );

    // No opener at all (a server, a container).
    std::fs::remove_file(&opener).unwrap();
    let r = link_with_path(&dev, &bin, &[S, "--open"]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, format!("evi://session/{S}\n"));
    assert!(
        r.stderr
            .contains(&format!("there is no `{OPENER}` on PATH")),
        "{}",
        r.stderr
    );
}
