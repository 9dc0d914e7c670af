//! `config.toml` in the eVi home. A missing file means defaults; an unknown
//! key is warned about (eVi and this tool share the file, and either may be
//! newer); a malformed file is an error naming the file, line and key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The address `evi web` serves on by default, and so the handoff URL.
pub const DEFAULT_WEB_URL: &str = "http://127.0.0.1:7878";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    pub tools: Tools,
    pub sync: SyncConfig,
    pub web: Web,
    pub agent: Agent,
    pub title: Title,
    /// Other agents whose sessions sync (opt-in: their data, not eVi's).
    pub agents: Agents,
    /// Where projects of other devices are on this one.
    pub paths: Paths,
    /// How long checkpoints are kept.
    pub checkpoints: Checkpoints,
}

/// `[checkpoints]`: `keep_days = 90` has every `evi sync push` forget this
/// device's checkpoint journal lines older than that, everywhere (see
/// `sync::engine::checkpoint_forget`). Off when absent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Checkpoints {
    pub keep_days: Option<u32>,
}

/// `[agents]`: which other agents' sessions sync (`<agent> = true`) and
/// where their folders are (`<agent>-dir = "…"`; see each agent's
/// [`crate::agents::Agent::folder`] for the default), for every agent
/// of the registry ([`crate::agents::Agent`]) by its name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Agents(std::collections::BTreeMap<String, AgentSetting>);

/// One value of `[agents]`: a switch or a folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum AgentSetting {
    On(bool),
    Dir(String),
}

impl Agents {
    /// Whether `<agent> = true`.
    pub fn on(&self, agent: &str) -> bool {
        matches!(self.0.get(agent), Some(AgentSetting::On(true)))
    }

    /// `<agent>-dir`, when set.
    pub fn dir(&self, agent: &str) -> Option<&str> {
        match self.0.get(&format!("{agent}-dir")) {
            Some(AgentSetting::Dir(d)) => Some(d),
            _ => None,
        }
    }

    /// Checks every key against the registry: `Err((key, what is wrong))`
    /// for a value of the wrong kind, else the keys that name no agent.
    fn check(&self) -> Result<Vec<String>, (String, String)> {
        let mut unknown = Vec::new();
        for (key, value) in &self.0 {
            let (name, is_dir) = match key.strip_suffix("-dir") {
                Some(name) => (name, true),
                None => (key.as_str(), false),
            };
            let known = crate::agents::Agent::others().any(|a| a.name() == name);
            let key = format!("agents.{key}");
            match (known, is_dir, value) {
                (false, _, _) => unknown.push(key),
                (true, false, AgentSetting::Dir(_)) => {
                    return Err((key, "expected true or false".into()));
                }
                (true, true, AgentSetting::On(_)) => {
                    return Err((key, "expected a folder, as a string".into()));
                }
                _ => {}
            }
        }
        Ok(unknown)
    }
}

/// `[paths]`: `"/their/prefix" = "/our/prefix"` pairs, and `search`, the
/// folders holding checkouts to look through for a project's git remote.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Paths {
    pub search: Vec<String>,
    #[serde(flatten)]
    pub map: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Tools {
    /// Whether eVi writes transcripts at all.
    pub transcripts: bool,
}

impl Default for Tools {
    fn default() -> Self {
        Self { transcripts: true }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SyncConfig {
    pub server: Option<String>,
    pub user: Option<String>,
    pub device: Option<String>,
    /// `evi sync watch` keeps this home synced: `sessions handoff` then
    /// pushes only what the watcher has not.
    pub auto: bool,
    /// Push replaces secrets in known formats with `[REDACTED:<rule>]`
    /// before a line is sealed (see [`crate::sync::engine::redact`]): on, because a
    /// key pasted once would otherwise be on every device a minute later.
    pub redact: bool,
    /// Rules that are off by default (they showed false positives on
    /// ordinary transcripts), turned on by id.
    pub redact_rules: Vec<String>,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            server: None,
            user: None,
            device: None,
            auto: false,
            redact: true,
            redact_rules: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Web {
    /// Base URL of the web UI other devices open (handoff links).
    pub url: Option<String>,
    /// Address `evi web` listens on.
    pub listen: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Agent {
    /// Command that resumes a session; `{session}` and `{home}` substituted.
    pub command: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Title {
    /// Command (run by `sh -c`) that reads a session's first messages on
    /// stdin and prints a title on stdout: the model `evi sessions title`
    /// asks.
    pub command: Option<String>,
    /// Seconds the command may take before it is killed.
    pub timeout: u64,
}

/// Seconds a `[title] command` may take unless `timeout` says otherwise: a
/// model answering a short prompt, with room for a slow network.
pub const DEFAULT_TITLE_TIMEOUT: u64 = 30;

impl Default for Title {
    fn default() -> Self {
        Self {
            command: None,
            timeout: DEFAULT_TITLE_TIMEOUT,
        }
    }
}

/// A config file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl ConfigError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            Self::Io { path, .. } => format!(
                "make {} readable, or move it away to run with the defaults",
                path.display()
            ),
            Self::Invalid { line, .. } => {
                format!("fix or remove line {line}, then run again")
            }
        }
    }
}

/// A loaded config and the warnings its loading produced.
#[derive(Debug, Default)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Loaded::default()),
            Err(source) => Err(ConfigError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Parses config text; `path` only names the file in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Loaded, ConfigError> {
        let invalid = |line: usize, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            line,
            message,
        };
        let de = toml::Deserializer::parse(text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(text, s.start));
            invalid(line, syntax_message(text, line, e.message()))
        })?;
        let mut unknown = Vec::new();
        let mut note = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
        let de = serde_ignored::Deserializer::new(de, &mut note);
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let line = e
                .inner()
                .span()
                .map_or_else(|| line_of_key(text, &key), |s| line_of(text, s.start));
            invalid(line, format!("key `{key}`: {}", e.inner().message()))
        })?;
        let agents = config.agents.check().map_err(|(key, why)| {
            invalid(line_of_key(text, &key), format!("key `{key}`: {why}"))
        })?;
        let mut found: Vec<(usize, String)> = unknown
            .into_iter()
            .chain(agents)
            .map(|k| (line_of_key(text, &k), k))
            .collect();
        found.sort();
        let warnings = found
            .into_iter()
            .map(|(line, k)| format!("{}:{line}: unknown key `{k}` ignored", path.display()))
            .collect();
        Ok(Loaded { config, warnings })
    }
}

/// A TOML syntax error said about what is on its line: the key whose value
/// is wrong (with the table it is in), or the table header, since the
/// parser's own words ("expected literal string") name neither.
fn syntax_message(text: &str, line: usize, message: &str) -> String {
    let Some(here) = text.lines().nth(line - 1).map(str::trim) else {
        return message.to_owned();
    };
    if here.starts_with('[') {
        return format!("table header `{here}`: {message} (a table is written `[name]`)");
    }
    let Some((key, value)) = here.split_once('=') else {
        return message.to_owned();
    };
    let (key, value) = (key.trim(), value.trim());
    let table = text
        .lines()
        .take(line - 1)
        .filter_map(|l| l.trim().strip_prefix('['))
        .last()
        .map(|h| h.trim_matches(['[', ']', ' ']).to_owned());
    let full = match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_owned(),
    };
    if message.contains("must be quoted") && !value.is_empty() && !value.contains('"') {
        return format!("key `{full}`: {message} (write {key} = \"{value}\")");
    }
    format!("key `{full}`: {message}")
}

/// 1-based line number of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Best-effort line of a dotted key such as `tools.transcripts`: the line of
/// its last segment after the line of its table header.
fn line_of_key(text: &str, key: &str) -> usize {
    let header = |t: &str| {
        t.strip_prefix('[').map(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .to_owned()
        })
    };
    if let Some(n) = text
        .lines()
        .position(|l| header(l.trim()).as_deref() == Some(key))
    {
        return n + 1;
    }
    let (table, last) = key.rsplit_once('.').unwrap_or(("", key));
    let mut in_table = table.is_empty();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(h) = header(t) {
            in_table = h == table;
        } else if in_table && t.split(['=', ' ']).next() == Some(last) {
            return n + 1;
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Loaded, ConfigError> {
        Config::parse(Path::new("config.toml"), text)
    }

    #[test]
    fn defaults_and_values() {
        let l = parse("[tools]\ntranscripts = false\n[web]\nurl = \"http://h:1\"\n").unwrap();
        assert!(!l.config.tools.transcripts);
        assert_eq!(l.config.web.url.as_deref(), Some("http://h:1"));
        assert!(l.warnings.is_empty());
        assert!(parse("").unwrap().config.tools.transcripts);
    }

    #[test]
    fn title_command_and_timeout() {
        let c = parse("").unwrap().config;
        assert_eq!((c.title.command, c.title.timeout), (None, 30));
        let c = parse("[title]\ncommand = \"llm -s 'a title'\"\ntimeout = 5\n")
            .unwrap()
            .config;
        assert_eq!(c.title.command.as_deref(), Some("llm -s 'a title'"));
        assert_eq!(c.title.timeout, 5);
        let e = parse("[title]\ntimeout = \"soon\"\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config.toml:2: key `title.timeout`"),
            "{e}"
        );
    }

    #[test]
    fn agents_and_paths() {
        let c = parse(
            "[agents]\nclaude-code = true\ncodex-dir = \"/x\"\n[paths]\n\"/home/a\" = \"/srv/b\"\nsearch = [\"~/code\"]\n",
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = c.config;
        assert!(c.agents.on("claude-code") && !c.agents.on("codex"));
        assert_eq!(c.agents.dir("codex"), Some("/x"));
        let w = parse("[agents]\nclaude-cod = true\n").unwrap();
        assert_eq!(
            w.warnings,
            ["config.toml:2: unknown key `agents.claude-cod` ignored"]
        );
        let e = parse("[agents]\ncodex = \"yes\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config.toml:2: key `agents.codex`: expected true or false"
        );
        assert_eq!(
            c.paths.map.get("/home/a").map(String::as_str),
            Some("/srv/b")
        );
        assert_eq!(c.paths.search, vec!["~/code"]);
    }

    #[test]
    fn unknown_key_warns() {
        let l = parse("[tools]\ntranscripts = true\ncolour = 3\n[other]\nx = 1\n").unwrap();
        assert_eq!(
            l.warnings,
            vec![
                "config.toml:3: unknown key `tools.colour` ignored",
                "config.toml:4: unknown key `other` ignored"
            ]
        );
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let e = parse("[sync]\nserver = \"x\"\n\n[tools]\ntranscripts = \"yes\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("config.toml:5: key `tools.transcripts`"),
            "{msg}"
        );
    }

    #[test]
    fn syntax_error_names_line() {
        let e = parse("[tools]\ntranscripts = \n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config.toml:2: key `tools.transcripts`:"),
            "{e}"
        );
    }

    #[test]
    fn an_unquoted_value_names_its_key_and_the_fix() {
        let e = parse("[sync]\nauto = true\n\n[web]\nurl = http://h:1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config.toml:5: key `web.url`: string values must be quoted, expected literal \
             string (write url = \"http://h:1\")"
        );
    }

    #[test]
    fn an_unclosed_table_names_the_header() {
        let e = parse("[tools]\ntranscripts = true\n[web\nurl = \"http://h:1\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config.toml:3: table header `[web`: unclosed table, expected `]` (a table is \
             written `[name]`)"
        );
    }
}
