//! `evi sessions handoff` carrying the git working tree, and `resume
//! --checkout` / `--worktree` bringing another clone there: real git, a
//! real server, two homes, two clones of one bare repository.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Device, Run, TestServer, sha256_hex, tree};
use crate::metadata_audit::database_dump;

const S: &str = "01JGITHANDOFF000000000000";

/// `git args` in `dir`, which must succeed; its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_DATE", "2026-06-08T09:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-06-08T09:00:00Z")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A bare repository and two clones of it, each with its eVi home.
struct Setup {
    _dir: tempfile::TempDir,
    server: TestServer,
    origin: PathBuf,
    laptop: PathBuf,
    desktop: PathBuf,
    a: Device,
    b: Device,
}

fn write(dir: &Path, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// `origin` (named `remote_name`) with one commit on `main`, cloned twice;
/// a session on the laptop's home.
fn setup(remote_name: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let origin = dir.path().join(remote_name);
    git(
        dir.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            origin.to_str().unwrap(),
        ],
    );
    let laptop = dir.path().join("laptop");
    let desktop = dir.path().join("desktop");
    let seed = dir.path().join("seed");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            origin.to_str().unwrap(),
            seed.to_str().unwrap(),
        ],
    );
    identity(&seed);
    write(&seed, "src/lib.rs", b"pub fn one() -> u32 {\n    1\n}\n");
    write(&seed, "notes.txt", b"first line\nsecond line\nthird line\n");
    write(&seed, "logo.png", &crate::common::random_bytes(4000, 7));
    git(&seed, &["add", "."]);
    git(&seed, &["commit", "-qm", "first"]);
    git(&seed, &["push", "-q", "origin", "main"]);
    for c in [&laptop, &desktop] {
        git(
            dir.path(),
            &["clone", "-q", origin.to_str().unwrap(), c.to_str().unwrap()],
        );
        identity(c);
    }
    let server = TestServer::start();
    let a = Device::new();
    let b = Device::new();
    a.init(&server, "pat", "laptop");
    b.join(&a, &server, "pat", "desktop");
    a.write(
        "2026-06-08",
        S,
        b"{\"role\":\"user\",\"content\":\"fix the auth bug\",\"ts\":\"2026-06-08T09:00:00Z\"}\n\
          {\"role\":\"assistant\",\"content\":\"editing src/lib.rs\",\"ts\":\"2026-06-08T09:00:05Z\"}\n",
    );
    Setup {
        _dir: dir,
        server,
        origin,
        laptop,
        desktop,
        a,
        b,
    }
}

fn identity(repo: &Path) {
    git(repo, &["config", "user.email", "pat@example.com"]);
    git(repo, &["config", "user.name", "Pat"]);
}

/// `evi args` on `dev` with the repository as the current directory.
fn evi_in(dev: &Device, repo: &Path, args: &[&str]) -> Run {
    dev.cmd()
        .current_dir(repo)
        .args(args)
        .output()
        .expect("run evi")
        .into()
}

/// Every file of a work tree (not `.git`): its SHA-256 and whether it is
/// executable, or where a symlink points.
fn files(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("-> {}", to.display()));
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                let exec = meta.permissions().mode() & 0o111 != 0;
                let bytes = std::fs::read(&path).unwrap();
                out.insert(rel, format!("{} exec={exec}", sha256_hex(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// What a user compares: the status, both diffs (staged and not, binary
/// and modes included), every file's bytes, and HEAD.
#[derive(Debug, PartialEq, Eq)]
struct Looks {
    head: String,
    branch: String,
    status: String,
    staged: String,
    unstaged: String,
    files: BTreeMap<String, String>,
}

fn looks(repo: &Path) -> Looks {
    Looks {
        head: git(repo, &["rev-parse", "HEAD"]),
        branch: git(repo, &["branch", "--show-current"]),
        status: git(repo, &["status", "--porcelain"]),
        staged: git(repo, &["diff", "--cached", "--binary", "--full-index"]),
        unstaged: git(repo, &["diff", "--binary", "--full-index"]),
        files: files(repo),
    }
}

/// Staged, unstaged, untracked (a new folder, an executable, a binary), a
/// committed binary changed, and an ignored file that must stay behind.
fn edit_everything(repo: &Path) {
    write(repo, ".gitignore", b"target/\n");
    write(repo, "src/lib.rs", b"pub fn one() -> u32 {\n    2\n}\n");
    git(repo, &["add", "src/lib.rs", ".gitignore"]);
    write(
        repo,
        "src/lib.rs",
        b"pub fn one() -> u32 {\n    3 // unstaged over staged\n}\n",
    );
    write(
        repo,
        "notes.txt",
        b"first line\nsecond line, edited\nthird line\n",
    );
    write(repo, "logo.png", &crate::common::random_bytes(5000, 8));
    write(repo, "new/dir/todo.md", b"- carry the tree\n");
    write(repo, "tools/run.sh", b"#!/bin/sh\necho run\n");
    std::fs::set_permissions(
        repo.join("tools/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(repo, "blob.bin", &crate::common::random_bytes(3000, 9));
    write(repo, "target/build.log", b"ignored, stays here\n");
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn uncommitted_edits_untracked_and_binary_files_reach_the_other_clone_exactly() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    git(&s.laptop, &["switch", "-qc", "fix-auth"]);
    write(&s.laptop, "src/auth.rs", b"pub fn check() {}\n");
    git(&s.laptop, &["add", "."]);
    git(&s.laptop, &["commit", "-qm", "auth"]);
    git(&s.laptop, &["push", "-q", "-u", "origin", "fix-auth"]);
    edit_everything(&s.laptop);
    let head = git(&s.laptop, &["rev-parse", "--short=7", "HEAD"]);
    let head = head.trim();

    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary = format!("branch fix-auth at {head}, pushed; 4 files changed, 3 untracked");
    assert!(
        run.stdout.starts_with(&format!(
            "handoff {S} (2 messages)\n  working tree: {summary}\n  1. sync this device:   evi sync push   (done)\n"
        )),
        "{}",
        run.stdout
    );
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);

    let before = looks(&s.desktop);
    let show = evi_in(&s.b, &s.desktop, &["sessions", "resume", S, "--print"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stderr.contains("working tree at handoff ("),
        "{}",
        show.stderr
    );
    assert!(show.stderr.contains(&summary), "{}", show.stderr);
    let here = git(&s.desktop, &["rev-parse", "--short=7", "HEAD"]);
    assert!(
        show.stderr.contains(&format!(
            "this checkout, {}: branch main at {}; clean",
            s.desktop.display(),
            here.trim()
        )),
        "{}",
        show.stderr
    );
    assert_eq!(
        looks(&s.desktop),
        before,
        "without --checkout nothing moves"
    );

    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "brought {} to the handoff: new branch fix-auth at {head}; 4 files changed, 3 untracked",
            s.desktop.display()
        )),
        "{}",
        run.stderr
    );
    let mut want = looks(&s.laptop);
    // The ignored file stays on the laptop.
    assert!(want.files.remove("target/build.log").is_some());
    assert_eq!(looks(&s.desktop), want);
    assert_eq!(
        git(&s.desktop, &["rev-parse", "--abbrev-ref", "@{u}"]).trim(),
        "origin/fix-auth"
    );
    // The conversation came along too.
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);

    // The web viewer's session heading shows the recorded state.
    let web = s.b.web("127.0.0.1:0");
    let page: serde_json::Value = crate::common::get(format!("{}/api/sessions/{S}", web.base))
        .unwrap()
        .json()
        .unwrap();
    let g = &page["session"]["git_state"];
    assert_eq!(g["summary"], summary.as_str());
    assert_eq!(g["branch"], "fix-auth");
    assert_eq!(g["untracked"], 3);
    assert!(g["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{g}");
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn committed_and_pushed_work_needs_no_blob_and_lands_on_the_branch() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    write(
        &s.laptop,
        "src/lib.rs",
        b"pub fn one() -> u32 {\n    7\n}\n",
    );
    git(&s.laptop, &["commit", "-qam", "seven"]);
    git(&s.laptop, &["push", "-q", "origin", "main"]);
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let head = git(&s.laptop, &["rev-parse", "HEAD"]);
    assert_eq!(v["git"]["head"], head.trim());
    assert_eq!(v["git"]["branch"], "main");
    assert_eq!(v["git"]["pushed"], true);
    assert_eq!(
        v["git"]["blob"],
        serde_json::Value::Null,
        "nothing to carry"
    );
    assert_eq!(v["git"]["remotes"][0]["name"], "origin");

    // The desktop's main is behind: it moves forward, never sideways.
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("(fast-forwarded from"),
        "{}",
        run.stderr
    );
    assert_eq!(looks(&s.desktop), looks(&s.laptop));

    // A second device diverged on main: the handoff goes on a new branch.
    let c = s.desktop.parent().unwrap().join("third");
    git(
        s.desktop.parent().unwrap(),
        &[
            "clone",
            "-q",
            s.origin.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
    );
    identity(&c);
    git(&c, &["reset", "-q", "--hard", "HEAD~1"]);
    write(&c, "mine.txt", b"mine\n");
    git(&c, &["add", "mine.txt"]);
    git(&c, &["commit", "-qm", "mine"]);
    let mine = git(&c, &["rev-parse", "HEAD"]);
    let run = evi_in(
        &s.b,
        &c,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("has diverged from it: the handoff is on a new branch evi/handoff-01JGITHA"),
        "{}",
        run.stderr
    );
    assert_eq!(
        git(&c, &["branch", "--show-current"]).trim(),
        "evi/handoff-01JGITHA"
    );
    assert_eq!(git(&c, &["rev-parse", "HEAD"]), head);
    assert_eq!(
        git(&c, &["rev-parse", "main"]),
        mine,
        "main is not rewritten"
    );
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn an_unpushed_commit_is_warned_about_then_carried_as_a_bundle_or_pushed() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    write(
        &s.laptop,
        "src/lib.rs",
        b"pub fn one() -> u32 {\n    11\n}\n",
    );
    git(&s.laptop, &["commit", "-qam", "local only"]);
    write(
        &s.laptop,
        "notes.txt",
        b"first line\nuncommitted on top\nthird line\n",
    );
    let head = git(&s.laptop, &["rev-parse", "HEAD"]);
    let short = &head[..7];

    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "warning: HEAD {short} is on no remote, so the other device cannot fetch it: \
             hand off with --push-branch (pushes main first) or --bundle"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains(&format!(
            "branch main at {short}, NOT on any remote; 1 file changed"
        )),
        "{}",
        run.stdout
    );

    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S, "--bundle"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "branch main at {short}, not on a remote, carried as a bundle; 1 file changed"
        )),
        "{}",
        run.stdout
    );
    assert_ne!(
        git(&s.origin, &["rev-parse", "main"]),
        head,
        "--bundle pushes nothing"
    );
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(looks(&s.desktop), looks(&s.laptop));

    // --push-branch pushes (never forced) and then the commit is fetchable.
    let run = evi_in(
        &s.a,
        &s.laptop,
        &["sessions", "handoff", S, "--push-branch"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("branch main at {short}, pushed; 1 file changed")),
        "{}",
        run.stdout
    );
    assert_eq!(git(&s.origin, &["rev-parse", "main"]), head);
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn a_busy_checkout_is_refused_and_a_new_worktree_gets_the_state() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    edit_everything(&s.laptop);
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    write(&s.desktop, "notes.txt", b"the desktop's own edit\n");
    write(&s.desktop, "scratch.txt", b"and an untracked file\n");
    let before = looks(&s.desktop);
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "error: {} has changes of its own:\n   M notes.txt\n  ?? scratch.txt",
            s.desktop.display()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--worktree PATH"), "{}", run.stderr);
    assert_eq!(looks(&s.desktop), before, "a busy checkout is not touched");
    assert_eq!(run.stdout, "", "the agent is not started on a refusal");

    let wt = s.desktop.parent().unwrap().join("desktop-handoff");
    let run = evi_in(
        &s.b,
        &s.desktop,
        &[
            "sessions",
            "resume",
            S,
            "--worktree",
            wt.to_str().unwrap(),
            "--print",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("brought {} to the handoff", wt.display())),
        "{}",
        run.stderr
    );
    let mut want = looks(&s.laptop);
    want.files.remove("target/build.log");
    let mut got = looks(&wt);
    // main is checked out in the desktop itself.
    assert_eq!(got.branch.trim(), "evi/handoff-01JGITHA");
    got.branch = want.branch.clone();
    assert_eq!(got, want);
    assert_eq!(looks(&s.desktop), before, "the checkout stays as it was");
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn a_conflicting_patch_leaves_marked_conflicts_and_the_checkout_untouched() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    // The laptop commits without pushing and edits on top: the desktop
    // cannot have that commit, so the changes go onto origin/main, whose
    // second line the desktop's side changed too.
    write(
        &s.laptop,
        "notes.txt",
        b"first line\nsecond line, laptop commit\nthird line\n",
    );
    git(&s.laptop, &["commit", "-qam", "unpushed"]);
    write(
        &s.laptop,
        "notes.txt",
        b"first line\nsecond line, laptop edit\nthird line\n",
    );
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let other = s.desktop.parent().unwrap().join("other");
    git(
        s.desktop.parent().unwrap(),
        &[
            "clone",
            "-q",
            s.origin.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    identity(&other);
    write(
        &other,
        "notes.txt",
        b"first line\nsecond line, pushed elsewhere\nthird line\n",
    );
    git(&other, &["commit", "-qam", "elsewhere"]);
    git(&other, &["push", "-q", "origin", "main"]);

    write(&s.desktop, "src/lib.rs", b"the desktop's own work\n");
    let before = looks(&s.desktop);
    let wt = s.desktop.parent().unwrap().join("desktop-handoff");
    let run = evi_in(
        &s.b,
        &s.desktop,
        &[
            "sessions",
            "resume",
            S,
            "--worktree",
            wt.to_str().unwrap(),
            "--print",
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("is not here and no remote has it"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("the carried changes conflict in 1 file, left marked there: notes.txt"),
        "{}",
        run.stderr
    );
    let marked = std::fs::read_to_string(wt.join("notes.txt")).unwrap();
    assert!(
        marked.contains("<<<<<<<")
            && marked.contains("second line, laptop edit")
            && marked.contains("second line, pushed elsewhere"),
        "{marked}"
    );
    assert!(git(&wt, &["status", "--porcelain"]).contains("UU notes.txt"));
    let kept = s.desktop.join(".git/evi-handoff/01JGITHA/unstaged.patch");
    assert!(
        std::fs::read_to_string(&kept)
            .unwrap()
            .contains("laptop edit"),
        "the patch is kept"
    );
    // The fetch moved origin/main only; the checkout is as it was.
    assert_eq!(looks(&s.desktop), before);
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn a_working_tree_past_50_mib_is_refused_and_nothing_is_recorded() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    write(&s.laptop, "small.txt", b"fits\n");
    // Random bytes: git's binary patch cannot make them smaller.
    write(
        &s.laptop,
        "dump.bin",
        &crate::common::random_bytes(51 << 20, 3),
    );
    let session = crate::common::session_files(&s.a, S);
    let before = std::fs::read(&session[0].1).unwrap();
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error: the unstaged changes and untracked files come to more than the 50 MiB \
             a handoff carries"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--no-git"), "{}", run.stderr);
    assert_eq!(
        std::fs::read(&session[0].1).unwrap(),
        before,
        "no entry was written"
    );
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S, "--no-git"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("working tree"), "{}", run.stdout);
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn no_git_or_no_checkout_is_said_plainly() {
    let s_dir = tempfile::tempdir().unwrap();
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    a.write(
        "2026-06-08",
        S,
        b"{\"role\":\"user\",\"content\":\"hi\",\"ts\":\"2026-06-08T09:00:00Z\"}\n",
    );
    // Not in a checkout: only the conversation goes, and it says so.
    let run = evi_in(&a, s_dir.path(), &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("is not in a git checkout"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("working tree"), "{}", run.stdout);
    // A checkout named, and git not there.
    let run: Run = a
        .cmd()
        .env("PATH", s_dir.path())
        .args([
            "sessions",
            "handoff",
            S,
            "--repo",
            s_dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("error: cannot run `git`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--no-git"), "{}", run.stderr);
    // A git older than the one this needs.
    let old = s_dir.path().join("old-git");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("git"), "#!/bin/sh\necho 'git version 2.20.1'\n").unwrap();
    std::fs::set_permissions(old.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        old.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run: Run = a
        .cmd()
        .env("PATH", path)
        .args([
            "sessions",
            "handoff",
            S,
            "--repo",
            s_dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error: git version 2.20.1 is too old: the working tree needs git 2.26 or later"
        ),
        "{}",
        run.stderr
    );
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn the_server_keeps_no_path_branch_or_content_of_the_repository() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("canary-remote-5521.git");
    git(&s.laptop, &["switch", "-qc", "canary-branch-7f3e"]);
    write(
        &s.laptop,
        "canary_dir/secret_path_91.rs",
        b"const C: &str = \"CANARY-COMMITTED-0c4e\";\n",
    );
    git(&s.laptop, &["add", "."]);
    git(&s.laptop, &["commit", "-qm", "CANARY-MESSAGE-8d2a"]);
    write(&s.laptop, "notes.txt", b"CANARY-UNSTAGED-3b9f\n");
    write(
        &s.laptop,
        "canary_untracked_77.txt",
        b"CANARY-UNTRACKED-6a1c\n",
    );
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S, "--bundle"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("carried as a bundle"), "{}", run.stdout);
    // It went through the server: the other clone gets it all.
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(looks(&s.desktop), looks(&s.laptop));

    let canaries = [
        "canary-remote-5521",
        "canary-branch-7f3e",
        "secret_path_91",
        "canary_untracked_77",
        "CANARY-COMMITTED-0c4e",
        "CANARY-MESSAGE-8d2a",
        "CANARY-UNSTAGED-3b9f",
        "CANARY-UNTRACKED-6a1c",
    ];
    let mut hay: Vec<(String, Vec<u8>)> = vec![("the database".into(), database_dump(&s.server))];
    for (root, what) in s.server.file_roots() {
        for (rel, bytes) in tree(&root) {
            hay.push((
                format!("the name {rel} in the {what}"),
                rel.clone().into_bytes(),
            ));
            if let Some(b) = bytes {
                hay.push((format!("{what}: {rel}"), b));
            }
        }
    }
    assert!(
        hay.len() > 3,
        "{:?}",
        hay.iter().map(|h| &h.0).collect::<Vec<_>>()
    );
    let mut found = Vec::new();
    for c in canaries {
        for (place, bytes) in &hay {
            let lower = bytes.to_ascii_lowercase();
            if memchr::memmem::find(&lower, c.to_ascii_lowercase().as_bytes()).is_some() {
                found.push(format!("{c} in {place}"));
            }
        }
    }
    assert!(found.is_empty(), "the server keeps: {found:?}");
}

/// Sets the modification time of `path` to `t`.
fn set_mtime(path: &Path, t: std::time::SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn a_file_edited_in_the_same_second_as_the_index_write_is_carried() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    // Without an untracked file git reads the copied index as it is; with
    // one, it writes the copy first (the file added as intent-to-add).
    for untracked in [false, true] {
        same_second_edit(untracked);
    }
}

fn same_second_edit(untracked: bool) {
    let s = setup("origin.git");
    // The race, made certain: git cannot tell from its stat data that a file
    // changed when its size and mtime are what the index recorded and the
    // index was written in that same second (a commit, then an edit within
    // the second); it then compares the content ("racily clean"). The ctime
    // of the edit is left out of the stat check (core.trustctime false, as
    // on file systems whose ctime cannot be trusted), so that the second
    // need not be hit by luck.
    git(&s.laptop, &["config", "core.trustctime", "false"]);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_780_909_200);
    let notes = s.laptop.join("notes.txt");
    write(
        &s.laptop,
        "notes.txt",
        b"first line\nsecond line\nthird, AAA\n",
    );
    git(&s.laptop, &["commit", "-qam", "three As"]);
    git(&s.laptop, &["push", "-q", "origin", "main"]);
    set_mtime(&notes, t);
    git(&s.laptop, &["update-index", "-q", "--refresh"]);
    // The same size, the same mtime: only the bytes differ.
    write(
        &s.laptop,
        "notes.txt",
        b"first line\nsecond line\nthird, BBB\n",
    );
    set_mtime(&notes, t);
    if untracked {
        write(&s.laptop, "scratch.txt", b"untracked\n");
    }
    set_mtime(&s.laptop.join(".git/index"), t);
    let status = git(&s.laptop, &["--no-optional-locks", "status", "--porcelain"]);
    let want = if untracked {
        " M notes.txt\n?? scratch.txt\n"
    } else {
        " M notes.txt\n"
    };
    assert_eq!(status, want, "git sees the edit");

    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("; 1 file changed"), "{}", run.stdout);
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read(s.desktop.join("notes.txt")).unwrap(),
        b"first line\nsecond line\nthird, BBB\n",
        "the edit came along: {}",
        run.stderr
    );
    assert_eq!(looks(&s.desktop), looks(&s.laptop));
}

/// Every file under `root` whose bytes hold `needle`.
fn holding(root: &Path, needle: &str) -> Vec<String> {
    tree(root)
        .into_iter()
        .filter(|(_, b)| {
            b.as_ref()
                .is_some_and(|b| memchr::memmem::find(b, needle.as_bytes()).is_some())
        })
        .map(|(rel, _)| rel)
        .collect()
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn secrets_in_the_working_tree_stay_on_the_device_and_are_named() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    let aws = "AKIAZ3QW7RT2LK5MN4XB";
    let gh = "ghp_7Hq2Lm9Xr4Tz8Kc1Vb5Nw3Jd6Fg0Sy2Pa4Ue";
    // Secrets by name: untracked, not ignored.
    write(&s.laptop, ".env", b"DB_PASSWORD=canary-dotenv-51\n");
    write(&s.laptop, "deploy/server.pem", b"canary-pem-52\n");
    write(&s.laptop, "keys/id_ed25519", b"canary-ssh-53\n");
    // Secrets by content: an untracked file, an unstaged edit of a tracked
    // one, and a staged one.
    write(
        &s.laptop,
        "config/prod.toml",
        format!("aws_access_key_id = \"{aws}\"\n").as_bytes(),
    );
    write(
        &s.laptop,
        "notes.txt",
        format!("first line\ntoken {gh}\nthird line\n").as_bytes(),
    );
    write(
        &s.laptop,
        "src/auth.rs",
        b"const URL: &str = \"postgres://app:canary-Pw-54x@db/app\";\n",
    );
    git(&s.laptop, &["add", "src/auth.rs"]);
    // What carries no secret goes as before.
    write(
        &s.laptop,
        "src/lib.rs",
        b"pub fn one() -> u32 {\n    5\n}\n",
    );
    write(&s.laptop, "todo.md", b"- ship it\n");
    write(&s.laptop, ".env.example", b"DB_PASSWORD=\n");

    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let head = git(&s.laptop, &["rev-parse", "--short=7", "HEAD"]);
    assert!(
        run.stdout.contains(&format!(
            "  working tree: branch main at {}, pushed; 1 file changed, 2 untracked; \
             6 secret files left out\n  \
             left on this device: .env (a secret by its name), config/prod.toml (holds a \
             secret: aws-access-token), deploy/server.pem (a secret by its name), \
             keys/id_ed25519 (a secret by its name), notes.txt (holds a secret: github-pat), \
             src/auth.rs (holds a secret: url-password)\n",
            head.trim()
        )),
        "{}",
        run.stdout
    );
    let json = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        v["git"]["left_out"][0],
        serde_json::json!({"path": ".env", "secret": "name"})
    );
    assert_eq!(
        v["git"]["left_out"][1],
        serde_json::json!({"path": "config/prod.toml", "secret": "aws-access-token"})
    );

    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("left on the other device: .env (a secret by its name), config/prod.toml"),
        "{}",
        run.stderr
    );
    let got = looks(&s.desktop);
    assert_eq!(
        got.status, " M src/lib.rs\n?? .env.example\n?? todo.md\n",
        "only what holds no secret came"
    );
    for canary in [
        "canary-dotenv-51",
        "canary-pem-52",
        "canary-ssh-53",
        aws,
        gh,
        "canary-Pw-54x",
    ] {
        assert_eq!(
            holding(&s.desktop, canary),
            Vec::<String>::new(),
            "{canary}"
        );
        assert_eq!(
            holding(&s.b.home(), canary),
            Vec::<String>::new(),
            "{canary}"
        );
    }
}

#[test]
#[cfg_attr(evi_no_git, ignore = "needs git (apt-get install git)")]
fn resume_without_an_agent_command_fails_before_it_changes_anything() {
    if !crate::common::tool_present("git", "--version", "apt-get install git") {
        return;
    }
    let s = setup("origin.git");
    edit_everything(&s.laptop);
    let run = evi_in(&s.a, &s.laptop, &["sessions", "handoff", S]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let before = looks(&s.desktop);
    let home_before = s.b.tree("");
    let run = evi_in(&s.b, &s.desktop, &["sessions", "resume", S, "--checkout"]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            1,
            "",
            "error: no agent command is configured: there is nothing to resume the session in\n\
             hint: pass --print for its messages as JSON (the checkout comes along with \
             --checkout), or set `[agent] command = \"your-agent --resume {session}\"` in \
             config.toml\n"
        )
    );
    assert_eq!(looks(&s.desktop), before, "the checkout was not brought");
    let mut home_after = s.b.tree("");
    // Any command that opens the sync state leaves its lock's pid.
    home_after.remove("sync/lock");
    let mut home_before = home_before;
    home_before.remove("sync/lock");
    assert!(home_after == home_before, "nothing was fetched");

    // With --print it goes on, checkout and all.
    let run = evi_in(
        &s.b,
        &s.desktop,
        &["sessions", "resume", S, "--checkout", "--print"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}
