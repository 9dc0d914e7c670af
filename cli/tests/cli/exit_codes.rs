//! Exit codes and where output goes.

use std::process::Command;

fn evi(args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_evi"))
        .args(args)
        .env("EVI_HOME", home.path())
        .output()
        .unwrap()
}

#[test]
fn usage_errors_exit_2_on_stderr() {
    for args in [
        &[][..],
        &["sessions", "frobnicate"],
        &["sessions", "list", "--limit", "x"],
    ] {
        let out = evi(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    for args in [&["--help"][..], &["--version"], &["sync", "--help"]] {
        let out = evi(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    let v = String::from_utf8(evi(&["--version"]).stdout).unwrap();
    assert_eq!(v, format!("evi {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn failures_exit_1() {
    let out = evi(&["sessions", "show", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: no session matches `nope`"));
}
