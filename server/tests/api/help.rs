//! `evi-server --help`: every flag, value and subcommand says what it is for
//! (the binary's flags are not a library type, so this reads the help the
//! operator reads).

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run evi-server");
    assert_eq!(out.status.code(), Some(0), "evi-server {args:?} --help");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// `(flag, description)` for each entry of the help's `Options:` and
/// `Commands:` sections, the description being the rest of the entry's line
/// or, in the long layout, its next line.
fn entries(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut section = "";
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            section = line.trim_end();
            continue;
        }
        let is_entry = match section {
            // Options start at column 2 (`-x, --flag`) or 6 (`--flag`).
            "Options:" | "Arguments:" => {
                let t = line.trim_start();
                let indent = line.len() - t.len();
                (indent == 2 || indent == 6) && (t.starts_with('-') || t.starts_with('<'))
            }
            "Commands:" => line.len() - line.trim_start().len() == 2,
            _ => false,
        };
        if !is_entry {
            continue;
        }
        let t = line.trim();
        // The flag and its value name, then two spaces, then the description.
        let (name, rest) = t.split_once("  ").unwrap_or((t, ""));
        let desc = if rest.trim().is_empty() {
            lines.get(i + 1).map_or("", |l| l.trim())
        } else {
            rest.trim()
        };
        out.push((name.trim().to_owned(), desc.to_owned()));
    }
    out
}

#[test]
fn every_flag_and_subcommand_has_a_description() {
    let top = help(&[]);
    let mut commands = vec![];
    let mut missing = vec![];
    let mut seen = 0;
    for (args, text) in std::iter::once((vec![], top.clone())).chain(
        entries(&top)
            .into_iter()
            .filter(|(n, _)| !n.starts_with('-') && n != "help")
            .map(|(n, _)| {
                commands.push(n.clone());
                let text = help(&[n.as_str()]);
                (vec![n], text)
            })
            .collect::<Vec<_>>(),
    ) {
        for (name, desc) in entries(&text) {
            seen += 1;
            // Only `[env: …]`, `[default: …]` or a list of values: no words.
            if desc.is_empty() || desc.starts_with('[') || desc.starts_with("Possible values") {
                missing.push(format!("evi-server {} {name}", args.join(" ")));
            }
        }
    }
    assert!(commands.contains(&"invite".to_owned()), "{top}");
    assert!(seen > 15, "read too few entries ({seen}) from:\n{top}");
    assert!(
        missing.is_empty(),
        "no description:\n{}",
        missing.join("\n")
    );
}

#[test]
fn value_choices_say_what_each_does() {
    let top = help(&[]);
    for line in [
        "- open:   Anyone who can reach the server may register",
        "- invite: Registering needs a one-time code from `evi-server invite`",
        "- closed: No new accounts; existing ones keep working",
        "- text: Human-readable lines",
        "- json: One JSON object per line, for log collectors",
    ] {
        assert!(
            top.lines().any(|l| l.trim() == line),
            "no `{line}` in:\n{top}"
        );
    }
}

/// `invite` writes a code into the data folder: the serving flags mean
/// nothing there, so it neither offers nor takes `--registration`, while
/// the server itself still does.
#[test]
fn invite_takes_no_registration_flag() {
    let text = help(&["invite"]);
    assert!(!text.contains("--registration <"), "{text}");
    assert!(text.contains("--data"), "{text}");
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_evi-server"))
        .args(["invite", "--registration", "open", "--data"])
        .arg(data.path())
        .output()
        .expect("run evi-server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: unexpected argument '--registration' found"),
        "{err}"
    );
    assert!(help(&[]).contains("--registration <REGISTRATION>"));
}
