//! Running a query: hits ranked by relevance (FTS5's bm25), then recency.

use rusqlite::params;

use super::agents::AgentSession;
use super::query::Query;
use super::{IndexError, SearchIndex};
use crate::source::Agent;

/// Which entries a search may return.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// Only entries of this role (`user`, `assistant`, `tool`, …).
    pub role: Option<&'a str>,
    /// Only entries in day files on or after this day (`YYYY-MM-DD`,
    /// local); another agent's entries (their files have no days) whose
    /// time is on or after its start.
    pub since_day: Option<&'a str>,
    /// Only sessions of this agent.
    pub agent: Option<Agent>,
    pub limit: usize,
}

/// One matching entry and where its line is.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The session's name in the index: an eVi session's id, another
    /// agent's stream name (`claude-code/<id>`).
    pub session: String,
    pub agent: Agent,
    pub entry: String,
    pub role: String,
    /// Epoch milliseconds of the line's `ts`.
    pub ts: Option<i64>,
    /// The day file's day; for another agent's entry, the local day of its
    /// time (empty when it has none).
    pub day: String,
    /// The file, under `transcripts/` (another agent's: its absolute path).
    pub path: String,
    pub offset: u64,
    pub len: u64,
    /// Relevance, higher is better (bm25, negated).
    pub score: f64,
}

/// Without a filter, at most this many matches, the newest indexed, are
/// ranked: ranking
/// every match of a word found in 100,000 lines took 130 ms at the p50
/// (bench/RESULTS.md, "## search"), well past a search's 50 ms. Past that
/// many, relevance among the newest matches is what a person wants anyway.
const RANKED: i64 = 10_000;

/// Rows ranked beyond the limit, so that hits tied on relevance at the
/// limit can still be ordered by time.
const TIE_ROOM: i64 = 20;

/// How many of the newest lines holding all of a phrase's words are ranked
/// and checked for the phrase: fewer than [`RANKED`], as each costs bm25 of
/// every word and a position check (10,000 gave `"cargo test"` a p99 of
/// 65 ms as a whole search on a quiet machine; bench/RESULTS.md). Fewer
/// phrase hits than asked among them falls back to the whole search.
const PHRASE_RANKED: i64 = 3_000;

/// Unfiltered, with a phrase: the newest matches of the phrase's words
/// (all of them, anywhere) are ranked by bm25 of those words, and kept if
/// they hold the phrase, checked by FTS5 on their rowid range only. Ranking
/// the phrase itself costs FTS5 a pass over every match of it in the whole
/// index first (bm25's IDF of a phrase): 95 ms of a 100 ms `"cargo test"`
/// on the bench home, against 27 ms this way (bench/RESULTS.md, "## search").
const PHRASE_SQL: &str = "WITH recent AS (
         SELECT rowid, bm25(fts) AS score FROM fts WHERE fts MATCH ?1
         ORDER BY rowid DESC LIMIT ?5
     ), phrase AS (
         SELECT rowid FROM fts WHERE fts MATCH ?2
           AND rowid >= (SELECT min(rowid) FROM recent)
     ), top AS (
         SELECT recent.rowid, score FROM recent JOIN phrase ON phrase.rowid = recent.rowid
         ORDER BY score LIMIT ?4 + ?6
     )
     SELECT s.name, e.entry, e.role, e.ts, f.day, f.path, e.offset, e.len, top.score,
            s.agent
     FROM top
     JOIN entries e ON e.id = top.rowid
     JOIN sessions s ON s.id = e.session
     JOIN files f ON f.id = e.file
     WHERE ?3 IS NULL
     ORDER BY top.score, e.ts DESC
     LIMIT ?4";

impl SearchIndex {
    pub fn find(&self, query: &Query, filter: &Filter<'_>) -> Result<Vec<Hit>, IndexError> {
        let unfiltered =
            filter.role.is_none() && filter.since_day.is_none() && filter.agent.is_none();
        if unfiltered && query.terms.iter().any(|t| t.tokens.len() > 1) {
            let hits = self.run(
                PHRASE_SQL,
                params![
                    query.words_match(),
                    query.to_match(),
                    filter.role,
                    filter.limit as i64,
                    PHRASE_RANKED,
                    TIE_ROOM
                ],
            )?;
            // Fewer than asked: the phrase may be rare among its words'
            // newest matches; the whole search says for sure.
            if hits.len() >= filter.limit {
                return Ok(hits);
            }
        }
        self.find_all(query, filter)
    }

    fn find_all(&self, query: &Query, filter: &Filter<'_>) -> Result<Vec<Hit>, IndexError> {
        // Unfiltered, rank the newest matches in the FTS table alone, in one
        // pass, and join only the top rows. Filtered, every match is joined
        // and ranked: a cap before the filter could leave nothing of a role
        // that is rare among the matches.
        let unfiltered =
            filter.role.is_none() && filter.since_day.is_none() && filter.agent.is_none();
        let since_ms = filter.since_day.and_then(local_midnight_ms);
        if unfiltered {
            // Nothing to filter by: ?2 and ?3 are null, named only so that
            // both statements take the same first parameters.
            return self.run(
                "WITH recent AS (
                     SELECT rowid, bm25(fts) AS score FROM fts WHERE fts MATCH ?1
                     ORDER BY rowid DESC LIMIT ?5
                 ), top AS (
                     SELECT rowid, score FROM recent ORDER BY score LIMIT ?4 + ?6
                 )
                 SELECT s.name, e.entry, e.role, e.ts, f.day, f.path, e.offset, e.len,
                        top.score, s.agent
                 FROM top
                 JOIN entries e ON e.id = top.rowid
                 JOIN sessions s ON s.id = e.session
                 JOIN files f ON f.id = e.file
                 WHERE ?2 IS NULL AND ?3 IS NULL
                 ORDER BY top.score, e.ts DESC
                 LIMIT ?4",
                params![
                    query.to_match(),
                    filter.role,
                    filter.since_day,
                    filter.limit as i64,
                    RANKED,
                    TIE_ROOM
                ],
            );
        }
        self.run(
            "SELECT s.name, e.entry, e.role, e.ts, f.day, f.path, e.offset, e.len,
                    bm25(fts), s.agent
             FROM fts
             JOIN entries e ON e.id = fts.rowid
             JOIN sessions s ON s.id = e.session
             JOIN files f ON f.id = e.file
             WHERE fts MATCH ?1
               AND (?2 IS NULL OR e.role = ?2)
               AND (?3 IS NULL
                    OR (s.agent = 'evi' AND f.day >= ?3)
                    OR (s.agent <> 'evi' AND e.ts >= ?7))
               AND (?8 IS NULL OR s.agent = ?8)
               AND ?5 + ?6 > 0
             ORDER BY bm25(fts), e.ts DESC
             LIMIT ?4",
            params![
                query.to_match(),
                filter.role,
                filter.since_day,
                filter.limit as i64,
                RANKED,
                TIE_ROOM,
                since_ms,
                filter.agent.map(Agent::name)
            ],
        )
    }

    fn run(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Hit>, IndexError> {
        let mut st = self.conn.prepare_cached(sql).map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params, |r| {
                let agent = Agent::from_name(&r.get::<_, String>(9)?).unwrap_or(Agent::Evi);
                let ts: Option<i64> = r.get(3)?;
                let day = match agent {
                    Agent::Evi => r.get(4)?,
                    _ => ts.map(local_day).unwrap_or_default(),
                };
                Ok(Hit {
                    session: r.get(0)?,
                    agent,
                    entry: super::update::read_id(r.get_ref(1)?).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            1,
                            r.get_ref_unwrap(1).data_type(),
                            Box::new(e),
                        )
                    })?,
                    role: r.get(2)?,
                    ts,
                    day,
                    path: r.get(5)?,
                    offset: r.get::<_, i64>(6)? as u64,
                    len: r.get::<_, i64>(7)? as u64,
                    score: -r.get::<_, f64>(8)?,
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }
}

impl SearchIndex {
    /// The raw line of a hit (without `\n`), read from its transcript.
    pub fn line_of(&self, hit: &Hit) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(self.transcripts.join(&hit.path))?;
        f.seek(SeekFrom::Start(hit.offset))?;
        let mut out = vec![0; hit.len as usize];
        f.read_exact(&mut out)?;
        Ok(out)
    }
}

/// A hit with the indexed text of its line, for its snippet (empty when
/// the line cannot be read back: the hit still names its entry).
#[derive(Debug, Clone)]
pub struct Found {
    pub hit: Hit,
    pub text: String,
}

impl SearchIndex {
    /// What `evi sessions search` and the viewer's search both run: bring
    /// the index up to date with `catalog` and `agents` (the sessions of
    /// the agents turned on here), find, and read each hit's line.
    pub fn search(
        &mut self,
        catalog: &crate::transcript::Catalog,
        agents: &[AgentSession],
        query: &Query,
        filter: &Filter<'_>,
    ) -> Result<Vec<Found>, IndexError> {
        self.update_all(catalog, agents)?;
        let hits = self.find(query, filter)?;
        Ok(hits
            .into_iter()
            .map(|hit| {
                let text = self
                    .line_of(&hit)
                    .map(|raw| super::text::agent_body(hit.agent, &raw))
                    .unwrap_or_default();
                Found { hit, text }
            })
            .collect())
    }
}

/// The first day (`YYYY-MM-DD`, local) of the last `days` days, today
/// counting as one: what `--days` and the viewer's `days=` filter on.
pub fn since_day(days: u32) -> String {
    use chrono::{Days, Local};
    let today = Local::now().date_naive();
    today
        .checked_sub_days(Days::new(u64::from(days.max(1)) - 1))
        .unwrap_or(today)
        .format("%Y-%m-%d")
        .to_string()
}

/// Epoch milliseconds of local midnight starting `day` (`YYYY-MM-DD`).
fn local_midnight_ms(day: &str) -> Option<i64> {
    use chrono::{Local, NaiveDate, TimeZone};
    let d = NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    Local
        .from_local_datetime(&d.and_hms_opt(0, 0, 0)?)
        .earliest()
        .map(|t| t.timestamp_millis())
}

/// The local day (`YYYY-MM-DD`) of epoch milliseconds `ms`.
pub(crate) fn local_day(ms: i64) -> String {
    use chrono::{Local, TimeZone};
    Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}
