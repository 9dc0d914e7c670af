//! `evi completions SHELL` and the hidden `evi man`: generated without an
//! eVi home, the script on stdout, the pages in the folder asked for.

use std::process::{Command, Output};

fn evi(args: &[&str]) -> Output {
    // A home that does not exist: neither command needs one, or creates one.
    let home = tempfile::tempdir().expect("temp dir");
    let missing = home.path().join("no-home");
    let out = Command::new(env!("CARGO_BIN_EXE_evi"))
        .args(args)
        .env("EVI_HOME", &missing)
        .output()
        .expect("run evi");
    assert!(
        !missing.exists(),
        "evi {args:?} created {}",
        missing.display()
    );
    out
}

#[test]
fn completions_for_every_shell_go_to_stdout() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = evi(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "completions {shell}");
        let script = String::from_utf8(out.stdout).expect("utf-8 script");
        assert!(script.contains("evi"), "{shell}: no `evi` in the script");
        assert!(script.contains("sync"), "{shell}: no `sync` in the script");
        assert!(
            script.contains("handoff"),
            "{shell}: no `handoff` in the script"
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{shell}: stderr");
    }
}

#[test]
fn completions_for_an_unknown_shell_is_a_usage_error() {
    let out = evi(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'tcsh'")
            && err.contains("[possible values: bash, elvish, fish, powershell, zsh]"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn man_writes_a_page_per_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pages = dir.path().join("man1");
    let out = evi(&["man", "-o", pages.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty(), "man writes files, not stdout");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("wrote man pages to {}\n", pages.display())
    );
    for page in [
        "evi.1",
        "evi-sync.1",
        "evi-sync-push.1",
        "evi-sync-key-export.1",
        "evi-sessions-handoff.1",
        "evi-completions.1",
    ] {
        let text =
            std::fs::read_to_string(pages.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{page} is not roff");
    }
    // Listed in `evi --help`, so it has a page like every command.
    assert!(pages.join("evi-man.1").exists());
    let top = std::fs::read_to_string(pages.join("evi.1")).expect("evi.1");
    assert!(top.contains("evi\\-sync(1)"), "evi.1 links its subcommands");
}

/// The README tells people to run `evi man`; `evi --help` lists it too.
#[test]
fn man_is_listed_in_help() {
    let out = evi(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("\n  completions "), "{help}");
    assert!(
        help.contains(
            "\n  man          Write man pages for evi and every subcommand into a folder\n"
        ),
        "{help}"
    );
}
