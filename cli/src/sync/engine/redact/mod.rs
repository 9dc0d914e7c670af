//! Secrets replaced before a line is sealed: a line that holds an API key, a
//! token, a private key block or a password in a URL leaves the device with
//! each secret replaced by `[REDACTED:<rule>]`.
//!
//! # Promises
//!
//! - The local file is never touched: only the bytes that are sealed change.
//! - A JSON line stays valid JSON: each JSON string is decoded, matched and,
//!   when it held a secret, encoded again in place; every byte outside the
//!   strings that held a secret stays as it was. So a key whose newlines are
//!   `\n` escapes, or whose slashes are `\/`, is matched as the text it
//!   stands for. A line that is not JSON is matched as raw bytes.
//! - A redacted line keeps the original's entry id and parent (derived from
//!   the original bytes): it travels in the with-ids form ([`carry`]), so
//!   the tree is the same on every device and every device shows the same
//!   redacted text. Push state covers the original bytes: a second push
//!   sends nothing.
//! - The rules are data ([`RULES`], `rules.toml`: their source is gitleaks'
//!   rule set, named per rule), matched only after a keyword prefilter, so a
//!   line without any rule's keyword costs one literal search.
//!
//! What it cannot promise: a secret in a format no rule knows; the middle
//! lines of a private key split over three or more transcript lines, when
//! none of them carries the block's BEGIN or END line; checkpoint blobs and
//! journals (prior contents of files, not transcript lines), which are not
//! redacted; lines pushed before redaction was turned on.

mod json;
pub mod names;
pub mod record;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

use crate::source::Agent;
use crate::sync::Entry;

/// The rule set, with each rule's source (see the file's header).
pub const RULES: &str = include_str!("rules.toml");

/// A rule as `rules.toml` writes it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub id: String,
    pub source: String,
    pub regex: String,
    pub keywords: Vec<String>,
    #[serde(default)]
    pub entropy: Option<f64>,
    #[serde(default)]
    pub allow: Option<String>,
    pub default: bool,
}

#[derive(serde::Deserialize)]
struct RuleFile {
    rules: Vec<RuleSpec>,
}

/// Every rule of [`RULES`], in file order.
pub fn rule_specs() -> Vec<RuleSpec> {
    toml::from_str::<RuleFile>(RULES)
        .expect("rules.toml is valid (tested)")
        .rules
}

/// A `[sync] redact_rules` entry that names no rule.
#[derive(Debug, thiserror::Error)]
#[error("`[sync] redact_rules` names `{name}`, which is not a redaction rule (known: {known})")]
pub struct UnknownRule {
    pub name: String,
    pub known: String,
}

struct Rule {
    id: String,
    re: Regex,
    allow: Option<Regex>,
    entropy: Option<f64>,
}

/// The rules turned on, compiled.
pub struct Redactor {
    rules: Vec<Rule>,
    /// Any keyword of any rule, lowercase and matched case-sensitively
    /// against lowercased text (see [`Self::mentions_keyword`]): the one
    /// search most lines stop at.
    any: Regex,
    /// Each keyword alone, to learn which rules to run.
    keywords: RegexSet,
    /// The rules each keyword of [`Self::keywords`] belongs to.
    keyword_rules: Vec<Vec<usize>>,
}

/// What redaction changed in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    /// The line to seal, secrets replaced (without ids added).
    pub line: Vec<u8>,
    /// Secrets replaced, by rule id.
    pub hits: BTreeMap<String, u64>,
}

fn build(pattern: &str) -> Regex {
    RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(32 << 20)
        .build()
        .unwrap_or_else(|e| panic!("rules.toml: bad regex {pattern:?}: {e}"))
}

impl Redactor {
    /// The rules `[sync]` turns on: with `redact`, every default rule, plus
    /// those `extra` names; `None` when that is no rule at all.
    pub fn configured(redact: bool, extra: &[String]) -> Result<Option<Self>, UnknownRule> {
        if !redact {
            return Ok(None);
        }
        let specs = rule_specs();
        for name in extra {
            if !specs.iter().any(|s| &s.id == name) {
                return Err(UnknownRule {
                    name: name.clone(),
                    known: specs
                        .iter()
                        .map(|s| s.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        let on: Vec<RuleSpec> = specs
            .into_iter()
            .filter(|s| s.default || extra.contains(&s.id))
            .collect();
        Ok((!on.is_empty()).then(|| Self::new(&on)))
    }

    /// The given rules, compiled.
    pub fn new(specs: &[RuleSpec]) -> Self {
        let mut words: Vec<String> = Vec::new();
        let mut keyword_rules: Vec<Vec<usize>> = Vec::new();
        let mut rules = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            for k in &s.keywords {
                let k = k.to_ascii_lowercase();
                match words.iter().position(|w| *w == k) {
                    Some(p) => keyword_rules[p].push(i),
                    None => {
                        words.push(k);
                        keyword_rules.push(vec![i]);
                    }
                }
            }
            rules.push(Rule {
                id: s.id.clone(),
                re: build(&s.regex),
                allow: s.allow.as_deref().map(build),
                entropy: s.entropy,
            });
        }
        let escaped: Vec<String> = words
            .iter()
            .map(|w| format!("(?i){}", regex::escape(w)))
            .collect();
        let any = build(
            &words
                .iter()
                .map(|w| regex::escape(w))
                .collect::<Vec<_>>()
                .join("|"),
        );
        let keywords = RegexSetBuilder::new(&escaped)
            .unicode(false)
            .build()
            .expect("escaped literals compile");
        Self {
            rules,
            any,
            keywords,
            keyword_rules,
        }
    }

    /// The rule ids turned on, in order.
    pub fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.id.as_str())
    }

    /// `raw` (a line without its newline) with its secrets replaced, or
    /// `None` when it holds none.
    pub fn redact_line(&self, raw: &[u8]) -> Option<Redacted> {
        if !self.mentions_keyword(raw) {
            return None;
        }
        let mut hits = BTreeMap::new();
        let line = if json::is_json(raw) {
            json::redact_strings(
                raw,
                |token| self.mentions_keyword(token),
                |text| self.redact_text(text, &mut hits),
            )?
        } else {
            self.redact_text(raw, &mut hits)?
        };
        Some(Redacted { line, hits })
    }

    /// The rules that find a secret anywhere in `text` (a whole file, as
    /// a handoff carries it: a key block over many lines is one match), in
    /// rule order; empty when none does.
    pub fn secrets_in(&self, text: &[u8]) -> Vec<String> {
        let mut hits = BTreeMap::new();
        self.redact_text(text, &mut hits);
        let mut found: Vec<String> = hits.into_keys().collect();
        found.sort_by_key(|id| self.rules.iter().position(|r| &r.id == id));
        found
    }

    /// Whether `text` holds a keyword, in any ASCII case. Lowercasing a
    /// copy and searching it for the lowercase keywords finds the same as
    /// a case-insensitive search, about four times faster: the literal
    /// search of the regex crate runs on the keywords as they are, while
    /// `(?i)` turns each into every mix of cases and leaves a byte-at-a-time
    /// automaton (230 against 880 MB/s over the bench home's lines). Every
    /// byte a push sends goes through here.
    fn mentions_keyword(&self, text: &[u8]) -> bool {
        thread_local! {
            static LOWER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        LOWER.with(|cell| {
            let Ok(mut lower) = cell.try_borrow_mut() else {
                return self.any.is_match(&text.to_ascii_lowercase());
            };
            lower.clear();
            lower.extend(text.iter().map(u8::to_ascii_lowercase));
            let found = self.any.is_match(&lower);
            // A huge line's copy is not kept for the rest of the push.
            if lower.capacity() > 1 << 20 {
                *lower = Vec::new();
            }
            found
        })
    }

    /// `text` with every secret replaced, or `None` when it holds none;
    /// counts what it replaced into `hits`.
    fn redact_text(&self, text: &[u8], hits: &mut BTreeMap<String, u64>) -> Option<Vec<u8>> {
        if !self.mentions_keyword(text) {
            return None;
        }
        let mut which: Vec<usize> = self
            .keywords
            .matches(text)
            .iter()
            .flat_map(|k| self.keyword_rules[k].iter().copied())
            .collect();
        which.sort_unstable();
        which.dedup();
        // (start, end, rule), then merged: the earliest span wins, and one
        // that overlaps it widens it, so no byte of either secret is left.
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for i in which {
            let rule = &self.rules[i];
            for caps in rule.re.captures_iter(text) {
                let Some(m) = caps.get(1).or_else(|| caps.get(0)) else {
                    continue;
                };
                let secret = m.as_bytes();
                if secret.is_empty()
                    || rule.allow.as_ref().is_some_and(|a| a.is_match(secret))
                    || rule.entropy.is_some_and(|min| entropy(secret) < min)
                {
                    continue;
                }
                spans.push((m.start(), m.end(), i));
            }
        }
        if spans.is_empty() {
            return None;
        }
        spans.sort_by_key(|&(s, e, _)| (s, std::cmp::Reverse(e)));
        let mut merged: Vec<(usize, usize, usize)> = Vec::new();
        for (s, e, i) in spans {
            match merged.last_mut() {
                Some(last) if s < last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e, i)),
            }
        }
        let mut out = Vec::with_capacity(text.len());
        let mut at = 0;
        for (s, e, i) in merged {
            out.extend_from_slice(&text[at..s]);
            let id = &self.rules[i].id;
            out.extend_from_slice(format!("[REDACTED:{id}]").as_bytes());
            *hits.entry(id.clone()).or_default() += 1;
            at = e;
        }
        out.extend_from_slice(&text[at..]);
        Some(out)
    }
}

/// Shannon entropy in bits per byte, as gitleaks measures a secret.
fn entropy(s: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in s {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// The bytes that carry a redacted line under the original's `id` and
/// `parent`: the redacted line itself when it names them already (another
/// agent's own ids, which redaction leaves), else its with-ids form (as
/// pull writes it, `DESIGN.md` "Pull never rewrites a file"), without the
/// trailing newline.
pub fn carry(agent: Agent, redacted: Vec<u8>, id: &str, parent: Option<&str>) -> Vec<u8> {
    let own = agent.explicit_ids(&redacted);
    if own.id.as_deref() == Some(id) && own.parent.as_ref().map(Option::as_deref) == Some(parent) {
        return redacted;
    }
    let is_object = crate::transcript::line::parse_head(&redacted)
        .fault
        .is_none();
    let e = Entry {
        id: id.to_owned(),
        parent: parent.map(str::to_owned),
        day: "1970-01-01".parse().expect("a day"),
        line: redacted,
        line_blob: None,
    };
    let mut out = agent.with_ids(&e, own.id.is_some(), is_object);
    out.pop();
    out
}
