//! Help texts: every subcommand and argument of `evi` says what it is for, and
//! the commands that need a secret or group others say so in `--help`.

use std::process::Command;

use clap::CommandFactory;
use evi::cli::Cli;

/// Every `evi …` path (`["sync", "key", "export"]`) with the command.
fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(String, clap::Command)>) {
    out.push((path.join(" "), cmd.clone()));
    for sub in cmd.get_subcommands() {
        path.push(sub.get_name().to_owned());
        walk(sub, path, out);
        path.pop();
    }
}

fn all_commands() -> Vec<(String, clap::Command)> {
    let mut root = Cli::command();
    root.build();
    let mut out = Vec::new();
    walk(&root, &mut vec!["evi".to_owned()], &mut out);
    out
}

fn described(s: Option<&clap::builder::StyledStr>) -> bool {
    s.is_some_and(|s| !s.to_string().trim().is_empty())
}

#[test]
fn every_subcommand_and_argument_has_a_description() {
    let mut missing = Vec::new();
    for (path, cmd) in all_commands() {
        if !described(cmd.get_about()) && !described(cmd.get_long_about()) {
            missing.push(format!("{path}: no description"));
        }
        for arg in cmd.get_arguments() {
            if !described(arg.get_help()) && !described(arg.get_long_help()) {
                missing.push(format!("{path}: `{}` has no description", arg.get_id()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "missing descriptions:\n{}",
        missing.join("\n")
    );
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_evi"))
        .args(args)
        .arg("--help")
        .env_remove("EVI_HOME")
        .output()
        .expect("run evi");
    assert_eq!(out.status.code(), Some(0), "evi {args:?} --help");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

#[test]
fn key_commands_name_the_passphrase_variable() {
    for path in [
        &["sync", "key"][..],
        &["sync", "key", "export"],
        &["sync", "key", "import"],
    ] {
        let text = help(path);
        assert!(
            text.contains("EVI_KEY_PASSPHRASE"),
            "evi {} --help does not name EVI_KEY_PASSPHRASE:\n{text}",
            path.join(" ")
        );
    }
}

#[test]
fn top_help_names_the_home_and_every_variable_that_stands_for_a_prompt() {
    let text = help(&[]);
    for var in [
        "EVI_HOME",
        "EVI_SYNC_PASSWORD",
        "EVI_KEY_PASSPHRASE",
        "EVI_SYNC_INVITE",
    ] {
        assert!(
            text.contains(var),
            "evi --help does not name {var}:\n{text}"
        );
    }
    assert!(
        text.contains("--yes"),
        "evi --help does not say how to confirm without a terminal:\n{text}"
    );
}

#[test]
fn top_help_lists_every_command() {
    let text = help(&[]);
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for sub in Cli::command().get_subcommands() {
        assert!(
            listed.contains(&sub.get_name()),
            "evi --help does not list `{}`:\n{text}",
            sub.get_name()
        );
    }
}

#[test]
fn sessions_blurb_lists_handoff_and_resume() {
    let text = help(&[]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sessions "))
        .expect("a `sessions` line in evi --help");
    for word in ["handoff", "resume"] {
        assert!(line.contains(word), "`{line}` does not mention {word}");
    }
}

#[test]
fn help_of_every_subcommand_exits_0_and_shows_no_bare_flag() {
    for (path, cmd) in all_commands() {
        let args: Vec<&str> = path.split(' ').skip(1).collect();
        if args.contains(&"help") {
            continue;
        }
        let text = help(&args);
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(
                    text.contains(&format!("--{long}")),
                    "{path} --help does not show --{long}"
                );
            }
        }
    }
}
