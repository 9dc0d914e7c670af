//! The name a session travels under: what the segment's session field holds
//! and what its keyed stream id is computed from.
//!
//! eVi's sessions keep their bare id, exactly as before sources existed, so
//! servers and devices that synced eVi sessions see the same stream ids.
//! Another agent's session is `<agent>/<session id>` (Claude Code
//! subagent transcripts `claude-code/<session id>/<file stem>`): an eVi
//! session id never holds a `/`, so the two can never name the same stream,
//! and the same id under two agents names two streams. A subagent's stream
//! belongs to its session's ([`StreamName::session_stream`]): a forget of
//! the session takes it too ([`StreamName::covers`]), and its segments say
//! so to the server (their `group`, see [`evi_shared::forget`]).

use std::fmt;

use evi_shared::SessionId;

use super::Agent;

/// A session of some agent, as sync names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamName {
    pub agent: Agent,
    pub session: SessionId,
    /// A transcript kept beside the session (a Claude Code subagent's), by
    /// its file stem.
    pub sub: Option<SessionId>,
}

impl StreamName {
    pub fn evi(session: SessionId) -> Self {
        Self {
            agent: Agent::Evi,
            session,
            sub: None,
        }
    }

    /// Parses a segment's session field. `None` when malformed.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('/');
        let first = parts.next()?;
        let Some(second) = parts.next() else {
            return Some(Self::evi(first.parse().ok()?));
        };
        let agent = Agent::from_name(first).filter(|a| *a != Agent::Evi)?;
        let session = second.parse().ok()?;
        let sub = match parts.next() {
            None => None,
            Some(stem) if agent.kind().has_side_transcripts() => Some(stem.parse().ok()?),
            Some(_) => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            agent,
            session,
            sub,
        })
    }

    /// The key of this stream's files in the push state: eVi's stay
    /// `<day>/<id>.jsonl`, others' start with the agent's name.
    pub fn state_key(&self) -> String {
        format!("{self}.jsonl")
    }

    /// The stream of the session this one belongs to: itself, or for a
    /// transcript kept beside a session (a subagent's), the session's.
    pub fn session_stream(&self) -> Self {
        Self {
            sub: None,
            ..self.clone()
        }
    }

    /// Whether a forget of this stream takes `other` too: the same stream,
    /// or, this being a session's own stream, a transcript beside it.
    pub fn covers(&self, other: &Self) -> bool {
        self == other
            || (self.sub.is_none()
                && other.agent == self.agent
                && other.session == self.session
                && other.sub.is_some())
    }
}

impl fmt::Display for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.agent {
            Agent::Evi => write!(f, "{}", self.session),
            a => {
                write!(f, "{}/{}", a.name(), self.session)?;
                if let Some(sub) = &self.sub {
                    write!(f, "/{sub}")?;
                }
                Ok(())
            }
        }
    }
}

/// As its name, the form it travels in.
impl serde::Serialize for StreamName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for StreamName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("`{s}` is no stream name")))
    }
}

impl crate::sync::engine::pending::WaitKey for StreamName {
    fn from_stem(stem: &str) -> Option<Self> {
        Self::parse(stem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses() {
        for s in [
            "abc",
            "claude-code/abc-1",
            "codex/0199",
            "claude-code/a/agent-1",
        ] {
            assert_eq!(StreamName::parse(s).unwrap().to_string(), s);
        }
        let (session, sub) = (
            StreamName::parse("claude-code/a").unwrap(),
            StreamName::parse("claude-code/a/agent-1").unwrap(),
        );
        assert_eq!(sub.session_stream(), session);
        assert!(session.covers(&sub) && session.covers(&session));
        assert!(!sub.covers(&session));
        assert!(!session.covers(&StreamName::parse("claude-code/b/agent-1").unwrap()));
        assert!(!session.covers(&StreamName::parse("codex/a").unwrap()));
        for s in [
            "evi/abc",
            "codex/a/b",
            "x/abc",
            "claude-code/../x",
            "claude-code/",
            "a/b/c/d",
        ] {
            assert!(StreamName::parse(s).is_none(), "{s}");
        }
    }
}
