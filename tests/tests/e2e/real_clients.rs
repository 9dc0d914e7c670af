//! The agents' own released clients as the judge of their sources: Claude
//! Code (`@anthropic-ai/claude-code`) and Codex (`@openai/codex`) from the
//! npm registry, pinned in `.ci/agents/package-lock.json`, run offline
//! against [`FakeModel`] on loopback, each device with its own `HOME`,
//! agent folders and eVi home.
//!
//! The fixture: a server and three devices of one account. A's project is
//! a git checkout with an `origin` remote; B's checkout of the same
//! repository is at another path, found by its remote (`[paths] search`);
//! C has no map and uses A's path (these devices share a disk: C's project
//! is A's very folder, as it would be at the same path on another
//! machine). Each device has a time zone of its own (`TZ`, for eVi and the
//! clients alike), so that what depends on local time shows.
//!
//! How the clients run offline (what `docs/agents.md` says of them):
//!
//! - Claude Code: `ANTHROPIC_BASE_URL` at the fake, a dummy
//!   `ANTHROPIC_API_KEY`, and `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`
//!   (without it, it looks up its API's host for more than the model
//!   calls); `DISABLE_AUTOUPDATER`, `DISABLE_TELEMETRY` and
//!   `DISABLE_ERROR_REPORTING` too, for good measure.
//! - Gemini CLI: `GOOGLE_GEMINI_BASE_URL` at the fake, a dummy
//!   `GEMINI_API_KEY` with `security.auth.selectedType = "gemini-api-key"`
//!   in `~/.gemini/settings.json` (with the variable alone it takes the
//!   base URL for a gateway it refuses), `GEMINI_CLI_NO_RELAUNCH=true`
//!   (no second node process), `GEMINI_CLI_TRUST_WORKSPACE=true` (else it
//!   refuses to run headless in a folder not trusted), usage statistics,
//!   telemetry and update checks off, and the model pinned with `-m` (the
//!   default, "auto", asks a classifier model first).
//! - Codex: a model provider of its own in `$CODEX_HOME/config.toml` whose
//!   `base_url` is the fake (`wire_api = "responses"`, its key from an
//!   environment variable), `check_for_update_on_startup = false`,
//!   analytics off, and the `plugins`, `remote_plugin` and `apps` features
//!   off (else it clones its plugin repository with git and asks two other
//!   hosts at start).
//!
//! - OpenCode: a provider of its own in `~/.config/opencode/opencode.json`
//!   (`@ai-sdk/openai-compatible`, its `baseURL` the fake's `/v1`, which it
//!   calls at `/chat/completions`), with `OPENCODE_DISABLE_AUTOUPDATE`,
//!   `_MODELS_FETCH`, `_LSP_DOWNLOAD`, `_SHARE`, `_DEFAULT_PLUGINS`,
//!   `_CLAUDE_CODE`, `_EXTERNAL_SKILLS` and `_EMBEDDED_WEB_UI`; and npm
//!   pointed at a closed port (`npm_config_registry`, `npm_config_offline`):
//!   else at start it installs its plugin package into its config folder
//!   from the npm registry.
//!
//! On the device that pulled a session, what its user reads of it is
//! checked the same way for every agent ([`Host::assert_seen_everywhere`]):
//! `sessions list`, `show`, `search`, the web viewer and `handoff` with the
//! agent's own resume command.
//!
//! Needs the clients (`EVI_AGENT_CLIENTS`, else `.ci/agents/node_modules/
//! .bin`; `.ci/run` installs them with npm). Without them the tests are
//! built ignored with that reason (`tests/build.rs`), except under CI,
//! where a missing client fails them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::agents::{claude, codex, enable, project};
use crate::common::{Device, Run, TestServer};
use crate::fake_model::{FakeModel, answer, conversation};
use crate::handoff_git::git;

/// The folder holding `claude` and `codex` (see `tests/build.rs`).
pub fn clients() -> PathBuf {
    let dir = PathBuf::from(env!("EVI_AGENT_CLIENTS_DIR"));
    assert!(
        ["claude", "codex", "gemini", "opencode"]
            .iter()
            .all(|c| dir.join(c).is_file()),
        "the agents' clients are not in {} (EVI_AGENT_CLIENTS): \
         `cd .ci/agents && npm install --no-save` installs them from the lock, as .ci/run does",
        dir.display()
    );
    dir
}

/// How long one run of a client may take before the test gives up on it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `cmd` (stdin closed) to its end, or kills it after
/// [`CLIENT_TIMEOUT`] and fails.
fn run_bounded(mut cmd: Command, what: &str) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id();
    let started = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(CLIENT_TIMEOUT) {
        Ok(out) => {
            eprintln!("{what}: {:?}", started.elapsed());
            out.expect("wait for the client").into()
        }
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{what}: still running after {CLIENT_TIMEOUT:?}, killed");
        }
    }
}

/// One device as its user has it: the eVi home, the agents' folders, a
/// time zone, the project.
pub struct Host<'a> {
    pub dev: &'a Device,
    pub name: &'static str,
    /// A POSIX `TZ` (fixed offsets: no time zone database needed).
    pub tz: &'static str,
    /// Its offset east of UTC, in seconds.
    pub offset: i32,
    pub project: String,
    pub fake: &'a FakeModel,
}

impl Host<'_> {
    /// The client `program` with this device's environment and no other,
    /// run in `cwd`.
    fn client(&self, program: &str, cwd: &str) -> Command {
        let mut c = Command::new(clients().join(program));
        c.current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dev.dir.path())
            .env("TZ", self.tz)
            .env("LANG", "C.UTF-8")
            .env("CLAUDE_CONFIG_DIR", claude(self.dev))
            .env("CODEX_HOME", codex(self.dev))
            .env("ANTHROPIC_BASE_URL", &self.fake.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("EVI_FAKE_MODEL_KEY", "not-a-key")
            .env("GEMINI_API_KEY", "not-a-key")
            .env("GOOGLE_GEMINI_BASE_URL", &self.fake.url)
            .env("GEMINI_CLI_NO_RELAUNCH", "true")
            .env("GEMINI_CLI_TRUST_WORKSPACE", "true");

        for v in [
            "AUTOUPDATE",
            "MODELS_FETCH",
            "LSP_DOWNLOAD",
            "SHARE",
            "DEFAULT_PLUGINS",
            "CLAUDE_CODE",
            "EXTERNAL_SKILLS",
            "EMBEDDED_WEB_UI",
        ] {
            c.env(format!("OPENCODE_DISABLE_{v}"), "1");
        }
        c.env("npm_config_registry", "http://127.0.0.1:9/")
            .env("npm_config_offline", "true");
        c
    }

    /// Gemini CLI's settings on this device: the API key as its way in,
    /// nothing sent anywhere but the model.
    pub fn configure_gemini(&self) {
        let home = crate::agents::gemini(self.dev);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("settings.json"),
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false}}"#,
        )
        .unwrap();
    }

    /// `gemini -m gemini-2.5-flash -o json ARGS` in `cwd`: the session it
    /// ran.
    pub fn gemini(&self, cwd: &str, args: &[&str]) -> String {
        let mut cmd = self.client("gemini", cwd);
        cmd.args(["-m", "gemini-2.5-flash", "-o", "json"])
            .args(args);
        let what = format!("{}: gemini {args:?}", self.name);
        let run = run_bounded(cmd, &what);
        assert_eq!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
        let out: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}{}", run.stdout, run.stderr));
        out["session_id"].as_str().expect("session_id").to_owned()
    }

    /// `evi ARGS` on this device (its time zone), which must succeed: its
    /// output.
    pub fn evi(&self, args: &[&str]) -> String {
        let run: Run = self
            .dev
            .sync_cmd()
            .env("TZ", self.tz)
            .args(args)
            .output()
            .unwrap()
            .into();
        assert_eq!(
            run.code, 0,
            "{}: evi {args:?}: {}{}",
            self.name, run.stdout, run.stderr
        );
        run.stdout
    }

    /// [`Self::evi`] with `--json`: what it printed, parsed.
    fn evi_json(&self, args: &[&str]) -> Value {
        let out = self.evi(&[args, &["--json"]].concat());
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{}: evi {args:?} --json: {e}: {out}", self.name))
    }

    /// `evi sync ARGS` on this device (its time zone), which must succeed.
    pub fn sync(&self, args: &[&str]) -> String {
        self.evi(&[&["sync"], args].concat())
    }

    /// `claude -p --output-format json ARGS` in `cwd`: the session it wrote
    /// to.
    pub fn claude(&self, cwd: &str, args: &[&str]) -> String {
        let mut cmd = self.client("claude", cwd);
        cmd.args(["-p", "--output-format", "json"]).args(args);
        let what = format!("{}: claude {args:?}", self.name);
        let run = run_bounded(cmd, &what);
        assert_eq!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
        let out: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", run.stdout));
        assert_eq!(out["is_error"], false, "{what}: {out}");
        out["session_id"].as_str().expect("session_id").to_owned()
    }

    /// Codex's configuration on this device: the fake as its provider.
    pub fn configure_codex(&self) {
        let home = codex(self.dev);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("config.toml"),
            format!(
                r#"model = "gpt-5.5"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{}/v1"
wire_api = "responses"
env_key = "EVI_FAKE_MODEL_KEY"

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
"#,
                self.fake.url
            ),
        )
        .unwrap();
    }

    /// `codex exec --json ARGS` in `cwd`: the thread it ran.
    pub fn codex(&self, cwd: &str, args: &[&str]) -> String {
        let mut cmd = self.client("codex", cwd);
        cmd.args(["exec", "--json"]).args(args);
        let what = format!("{}: codex exec {args:?}", self.name);
        let run = run_bounded(cmd, &what);
        assert_eq!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
        run.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "thread.started")
            .and_then(|e| e["thread_id"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("{what}: no thread.started in {}", run.stdout))
    }
}

impl Host<'_> {
    /// OpenCode's data folder on this device (`~/.local/share/opencode`).
    pub fn opencode_dir(&self) -> PathBuf {
        self.dev.dir.path().join(".local/share/opencode")
    }

    /// OpenCode's configuration on this device: the fake as its provider
    /// and model.
    pub fn configure_opencode(&self) {
        let dir = self.dev.dir.path().join(".config/opencode");
        std::fs::create_dir_all(&dir).unwrap();
        let config = serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "model": "fake/fake-model",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": format!("{}/v1", self.fake.url), "apiKey": "not-a-key"},
                "models": {"fake-model": {"name": "Fake model"}},
            }},
        });
        std::fs::write(dir.join("opencode.json"), config.to_string()).unwrap();
    }

    /// `opencode ARGS` in `cwd`, which must succeed: its output.
    pub fn opencode_raw(&self, cwd: &str, args: &[&str]) -> Run {
        let mut cmd = self.client("opencode", cwd);
        cmd.args(args);
        let what = format!("{}: opencode {args:?}", self.name);
        let run = run_bounded(cmd, &what);
        assert_eq!(run.code, 0, "{what}: {}{}", run.stdout, run.stderr);
        run
    }

    /// `opencode run --format json ARGS` in `cwd`: the session it ran.
    pub fn opencode(&self, cwd: &str, args: &[&str]) -> String {
        let run = self.opencode_raw(cwd, &[&["run", "--format", "json"][..], args].concat());
        run.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|e| e["sessionID"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("{}: no sessionID in {}", self.name, run.stdout))
    }
}

/// The program and first arguments that resume a session of `agent` (by
/// its `evi` name), as each agent's own documentation gives them: what a
/// handoff must print.
fn resume_program(agent: &str) -> &'static str {
    match agent {
        "claude-code" => "claude --resume",
        "codex" => "codex resume",
        "gemini" => "gemini --resume",
        "opencode" => "opencode --session",
        other => panic!("no real client for {other}"),
    }
}

impl Host<'_> {
    /// What a user on this device checks of `agent`'s session `id` that it
    /// pulled, whose turns so far were the prompts `said` (each answered by
    /// the fake): `evi sessions list` (and `--json`) lists it with its agent
    /// and what it is about; `sessions show` has every prompt and answer;
    /// `sessions search WORD` (a word of a prompt) finds it; the web
    /// viewer's API lists, opens and finds it the same; and `sessions
    /// handoff` prints the agent's own resume command for it, from this
    /// device's project.
    pub fn assert_seen_everywhere(&self, agent: &str, id: &str, said: &[&str], word: &str) {
        use crate::web::{get, json, search_api};
        let (who, stream) = (self.name, format!("{agent}/{id}"));
        let texts = |messages: &Value| -> Vec<String> {
            let all = messages.as_array().cloned().unwrap_or_default();
            all.iter()
                .map(|m| m["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let has_every_turn = |texts: &[String], what: &str| {
            for p in said {
                for t in [(*p).to_owned(), answer(p)] {
                    assert!(
                        texts.iter().any(|x| x.contains(&t)),
                        "{who}: {what} lacks {t:?}: {texts:?}"
                    );
                }
            }
        };

        // The list, as JSON and as the table: the agent, and the title or
        // else the first prompt.
        let listing = self.evi_json(&["sessions", "list"]);
        let row = listing["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{who}: `sessions list --json` lacks {id}: {listing}"))
            .clone();
        assert_eq!(row["agent"], agent, "{who}: {row}");
        assert_eq!(row["first_message"], said[0], "{who}: {row}");
        assert_eq!(row["project"], self.project.as_str(), "{who}: {row}");
        let shown = row["title"].as_str().unwrap_or(said[0]);
        let short = row["short_id"].as_str().unwrap();
        let table = self.evi(&["sessions", "list"]);
        let start: String = shown.chars().take(20).collect();
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(agent) && l.contains(short) && l.contains(&start)),
            "{who}: `sessions list` lacks {agent} {short} {start:?}:\n{table}"
        );

        // Show, as text and as JSON.
        let show = self.evi(&["sessions", "show", &stream]);
        has_every_turn(&[show], "`sessions show`");
        let page = self.evi_json(&["sessions", "show", &stream]);
        has_every_turn(&texts(&page["messages"]), "`sessions show --json`");

        // Search, as JSON and as text.
        let found = self.evi_json(&["sessions", "search", word]);
        assert!(
            found["hits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["session"] == id && h["agent"] == agent),
            "{who}: `sessions search {word}` lacks {stream}: {found}"
        );
        let text = self.evi(&["sessions", "search", word]);
        assert!(
            text.lines()
                .any(|l| l.starts_with(agent) && l.contains(short)),
            "{who}: `sessions search {word}` lacks {agent} {short}:\n{text}"
        );

        // The web viewer: the list's row, the session's page, the search.
        let web = self.dev.web("127.0.0.1:0");
        let listed = json(get(&web, "/api/sessions"));
        let web_row = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id);
        assert_eq!(web_row, Some(&row), "{who}: the viewer's list: {listed}");
        let opened = json(get(
            &web,
            &format!("/api/sessions/{agent}%2F{id}?limit=500"),
        ));
        assert_eq!(opened["session"], row, "{who}: the viewer's page");
        has_every_turn(&texts(&opened["messages"]), "the viewer's page");
        let searched = json(search_api(&web, &[("q", word)]));
        assert!(
            searched["hits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["session"] == id && h["open"] == stream.as_str()),
            "{who}: the viewer's search for {word} lacks {stream}: {searched}"
        );
        drop(web);

        // The handoff, pushed and as printed on a device that has it: the
        // agent's own command, from the project here.
        let resume = format!("cd {} && {} {id}", self.project, resume_program(agent));
        let steps = self.evi(&["sessions", "handoff", &stream]);
        assert!(
            steps.lines().any(|l| l.trim() == resume),
            "{who}: handoff lacks `{resume}`:\n{steps}"
        );
        let h = self.evi_json(&["sessions", "handoff", &stream, "--no-push"]);
        assert_eq!(h["resume_command"], resume, "{who}: {h}");
        assert_eq!(h["agent"], agent, "{who}: {h}");
        assert_eq!(h["project"], self.project.as_str(), "{who}: {h}");
    }
}

/// A server, the fake model, and devices A, B and C of one account.
pub struct World {
    /// Kept running while the world lives.
    _server: TestServer,
    pub fake: FakeModel,
    pub a: Device,
    pub b: Device,
    pub c: Device,
}

/// A new repository at `dir` whose `origin` is `url`.
fn checkout(dir: &str, url: &str) {
    std::fs::create_dir_all(dir).unwrap();
    git(Path::new(dir), &["init", "-q"]);
    git(Path::new(dir), &["remote", "add", "origin", url]);
}

impl World {
    pub fn new() -> Self {
        let server = TestServer::start();
        let (a, b, c) = (Device::new(), Device::new(), Device::new());
        a.init(&server, "pat", "laptop");
        b.join_copying_key(&a, &server.url, "pat", "desktop");
        c.join_copying_key(&a, &server.url, "pat", "server");
        let proj_a = project(&a, "work/app");
        checkout(&proj_a, "git@github.com:pat/app.git");
        let code_b = project(&b, "code");
        checkout(&format!("{code_b}/app"), "https://github.com/pat/app");
        enable(&a, "");
        enable(&b, &format!("[paths]\nsearch = [\"{code_b}\"]\n"));
        enable(&c, "");
        Self {
            _server: server,
            fake: FakeModel::start(),
            a,
            b,
            c,
        }
    }

    /// The server's URL, for a device joining later.
    pub fn server_url(&self) -> String {
        self._server.url.clone()
    }

    /// The three devices as their users have them: A in UTC with its
    /// project, B seven hours behind with its checkout elsewhere, C five and
    /// a half ahead with A's path.
    pub fn hosts(&self) -> [Host<'_>; 3] {
        let proj_a = project(&self.a, "work/app");
        [
            self.host(&self.a, "A", ("UTC0", 0), proj_a.clone()),
            self.host(
                &self.b,
                "B",
                ("PDT+7", -7 * 3600),
                project(&self.b, "code/app"),
            ),
            self.host(&self.c, "C", ("IST-5:30", 5 * 3600 + 1800), proj_a),
        ]
    }

    /// `dev` as a host in the time zone `(TZ, offset east of UTC in
    /// seconds)`, working in `project`.
    pub fn host<'a>(
        &'a self,
        dev: &'a Device,
        name: &'static str,
        (tz, offset): (&'static str, i32),
        project: String,
    ) -> Host<'a> {
        Host {
            dev,
            name,
            tz,
            offset,
            project,
            fake: &self.fake,
        }
    }

    /// Runs `client` once for each of `forms` (its resume arguments and a
    /// prompt) on device `who`: each run must go on with session `id` and
    /// send the model every turn of `said` before it ([`Self::assert_carried`]);
    /// its prompt joins `said` after.
    pub fn resume_each<'p>(
        &self,
        who: &str,
        id: &str,
        said: &mut Vec<&'p str>,
        forms: [(&[&str], &'p str); 2],
        client: impl Fn(&[&str], &str) -> String,
    ) {
        for (args, prompt) in forms {
            let run = client(args, prompt);
            assert_eq!(run, id, "{who}'s {args:?} resumed the session");
            self.assert_carried(prompt, said);
            said.push(prompt);
        }
    }

    /// The model request of the turn whose prompt is `prompt` showed the
    /// model every turn before it: each prompt of `earlier`, then its
    /// answer, in order, then `prompt` (the context a client adds, such as
    /// instructions and environment notes, aside).
    pub fn assert_carried(&self, prompt: &str, earlier: &[&str]) {
        let turns = self.fake.turns_for(prompt);
        let Some(request) = turns.last() else {
            panic!(
                "no model request for {prompt:?}; the fake saw: {:?}",
                self.fake
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect::<Vec<_>>()
            );
        };
        let mut want: Vec<(String, String)> = Vec::new();
        for p in earlier {
            want.push(("user".into(), (*p).to_owned()));
            want.push(("assistant".into(), answer(p)));
        }
        want.push(("user".into(), prompt.to_owned()));
        let known: Vec<&String> = want.iter().map(|(_, t)| t).collect();
        let shown: Vec<(String, String)> = conversation(&request.body)
            .into_iter()
            .filter(|(_, t)| known.contains(&t))
            .collect();
        assert_eq!(
            shown, want,
            "the request for {prompt:?} did not carry every earlier turn"
        );
    }
}

/// `text` with every `"cwd":"<from>"` (and below it) written for `to`: how a
/// file of one device reads on another.
pub fn cwd_swapped(text: &str, from: &str, to: &str) -> String {
    let (from, to) = (format!("\"cwd\":\"{from}"), format!("\"cwd\":\"{to}"));
    text.replace(&from, &to)
}

/// `got` is `want`, or a failure naming the first line that differs.
pub fn assert_same_lines(got: &str, want: &str, what: &str) {
    if got == want {
        return;
    }
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    let at = g
        .iter()
        .zip(&w)
        .position(|(x, y)| x != y)
        .unwrap_or(g.len().min(w.len()));
    let cut = |l: Option<&&str>| l.map(|l| l.chars().take(600).collect::<String>());
    panic!(
        "{what}: {} lines, {} wanted; line {} differs:\n  got:  {:?}\n  want: {:?}",
        g.len(),
        w.len(),
        at + 1,
        cut(g.get(at)),
        cut(w.get(at))
    );
}
