//! Which exchanges and anomalies `dissect` keeps: APIs, client ids and topics as case-sensitive
//! shell patterns, errors, latency, connections, times. Its verdicts are those of the library's
//! filter over items (dissector/filters.py's Filter), so a pattern reads as fnmatch.fnmatchcase
//! reads it, quirks included.
use crate::exchanges::{ExchangeItem, Item};

/// What a filter keeps, as `dissect`'s options give it: API names or keys, client id and topic
/// patterns, errors only, a least latency, connection ids and a time range.
#[derive(Default, Clone, Debug)]
pub struct FilterSpec {
    pub apis: Vec<String>,
    pub client_ids: Vec<String>,
    pub topics: Vec<String>,
    pub errors_only: bool,
    pub min_latency: Option<f64>,
    pub connections: Vec<i64>,
    pub time_from: Option<f64>,
    pub time_to: Option<f64>,
}

#[derive(Clone)]
pub struct Filter {
    /// lower-case names and decimal keys
    apis: Vec<String>,
    client_ids: Vec<Pattern>,
    topics: Vec<Pattern>,
    errors_only: bool,
    min_latency: Option<f64>,
    connections: Vec<i64>,
    time_from: Option<f64>,
    time_to: Option<f64>,
}

impl Filter {
    pub fn new(spec: FilterSpec) -> Self {
        let mut apis = spec.apis;
        apis.sort();
        let patterns = |v: &[String]| v.iter().map(|p| Pattern::new(p)).collect();
        Filter {
            apis,
            client_ids: patterns(&spec.client_ids),
            topics: patterns(&spec.topics),
            errors_only: spec.errors_only,
            min_latency: spec.min_latency,
            connections: spec.connections,
            time_from: spec.time_from,
            time_to: spec.time_to,
        }
    }

    /// Whether the filter asks what only an exchange has (API, client id, topic, errors,
    /// latency): then no anomaly passes
    fn exchange_only(&self) -> bool {
        !self.apis.is_empty()
            || !self.client_ids.is_empty()
            || !self.topics.is_empty()
            || self.errors_only
            || self.min_latency.is_some()
    }

    fn connection_and_time(&self, connection: Option<u64>, ts: Option<f64>) -> bool {
        if !self.connections.is_empty()
            && !connection.is_some_and(|c| self.connections.contains(&(c as i64)))
        {
            return false;
        }
        if let Some(from) = self.time_from {
            if ts.is_none_or(|t| t < from) {
                return false;
            }
        }
        if let Some(to) = self.time_to {
            if ts.is_none_or(|t| t >= to) {
                return false;
            }
        }
        true
    }

    /// Whether an item passes, `connection` being the id the caller shows it under (a land run's
    /// stable id, else the item's own); `topics` gives an exchange's topic names
    /// (Render::topics) when a topic pattern asks for them. Anomalies and connections pass on
    /// their connection and time when nothing is asked of exchanges alone.
    pub fn keeps(
        &self,
        item: &Item,
        connection: Option<u64>,
        topics: impl FnOnce() -> Vec<std::rc::Rc<str>>,
    ) -> bool {
        match item {
            Item::Anomaly(a) => {
                self.connection_and_time(connection, Some(a.ts)) && !self.exchange_only()
            }
            Item::Connection(k) => {
                self.connection_and_time(connection, k.first_ts) && !self.exchange_only()
            }
            Item::Exchange(x) => self.keeps_exchange(x, connection, topics),
        }
    }

    fn keeps_exchange(
        &self,
        x: &ExchangeItem,
        connection: Option<u64>,
        topics: impl FnOnce() -> Vec<std::rc::Rc<str>>,
    ) -> bool {
        if !self.connection_and_time(connection, x.ts.or(x.response_ts)) {
            return false;
        }
        if !self.apis.is_empty() {
            let name = x.api_name.to_lowercase();
            let key = match x.api_key {
                Some(k) => k.to_string(),
                None => "None".to_string(),
            };
            if !self.apis.contains(&name) && !self.apis.contains(&key) {
                return false;
            }
        }
        if !self.client_ids.is_empty() {
            let cid = x.client_id.as_deref().unwrap_or("");
            if !self.client_ids.iter().any(|p| p.matches(cid)) {
                return false;
            }
        }
        if self.errors_only && x.error_codes.is_empty() && x.status == "ok" {
            return false;
        }
        if let Some(min) = self.min_latency {
            if x.latency_ms.is_none_or(|l| l < min) {
                return false;
            }
        }
        if !self.topics.is_empty() {
            let names = topics();
            if !names
                .iter()
                .any(|t| self.topics.iter().any(|p| p.matches(t)))
            {
                return false;
            }
        }
        true
    }
}

/// A case-sensitive shell pattern: `*`, `?`, `[...]` and `[!...]` with ranges, an unclosed `[`
/// literal.
#[derive(Clone)]
pub struct Pattern(Vec<Tok>);

#[derive(Clone)]
enum Tok {
    Star,
    Any,
    Lit(char),
    /// (negated, single characters and ranges); `never` for an empty set
    Set(bool, Vec<(char, char)>),
    Never,
}

impl Pattern {
    pub fn new(pat: &str) -> Self {
        let p: Vec<char> = pat.chars().collect();
        let n = p.len();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < n {
            let c = p[i];
            i += 1;
            match c {
                '*' => {
                    if !matches!(toks.last(), Some(Tok::Star)) {
                        toks.push(Tok::Star);
                    }
                }
                '?' => toks.push(Tok::Any),
                '[' => {
                    let mut j = i;
                    if j < n && p[j] == '!' {
                        j += 1;
                    }
                    if j < n && p[j] == ']' {
                        j += 1;
                    }
                    while j < n && p[j] != ']' {
                        j += 1;
                    }
                    if j >= n {
                        toks.push(Tok::Lit('['));
                        continue;
                    }
                    toks.push(set(&p, i, j));
                    i = j + 1;
                }
                c => toks.push(Tok::Lit(c)),
            }
        }
        Pattern(toks)
    }

    pub fn matches(&self, s: &str) -> bool {
        let s: Vec<char> = s.chars().collect();
        // iterative glob match with backtracking to the last star
        let toks = &self.0;
        let (mut t, mut i) = (0, 0);
        let mut back: Option<(usize, usize)> = None;
        loop {
            if t < toks.len() {
                match &toks[t] {
                    Tok::Star => {
                        back = Some((t, i));
                        t += 1;
                        continue;
                    }
                    tok if i < s.len() && one(tok, s[i]) => {
                        t += 1;
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
            } else if i == s.len() {
                return true;
            }
            match back {
                Some((bt, bi)) if bi < s.len() => {
                    back = Some((bt, bi + 1));
                    t = bt + 1;
                    i = bi + 1;
                }
                _ => return false,
            }
        }
    }
}

fn one(tok: &Tok, c: char) -> bool {
    match tok {
        Tok::Any => true,
        Tok::Lit(l) => *l == c,
        Tok::Set(neg, items) => items.iter().any(|(a, b)| *a <= c && c <= *b) != *neg,
        Tok::Never | Tok::Star => false,
    }
}

/// The character set of p[i..j] (after `[`, before `]`).
fn set(p: &[char], i: usize, j: usize) -> Tok {
    let stuff: Vec<char> = p[i..j].to_vec();
    // the chunks between range hyphens (each hyphen joins the last char of one chunk and the
    // first of the next); within a chunk every char is literal
    let mut chunks: Vec<Vec<char>> = Vec::new();
    if !stuff.contains(&'-') {
        chunks.push(stuff);
    } else {
        let mut start = i;
        let mut k = if p[i] == '!' { i + 2 } else { i + 1 };
        while let Some(at) = (k..j).find(|&x| p[x] == '-') {
            chunks.push(p[start..at].to_vec());
            start = at + 1;
            k = at + 3;
        }
        let chunk = p[start..j].to_vec();
        if !chunk.is_empty() {
            chunks.push(chunk);
        } else if let Some(last) = chunks.last_mut() {
            last.push('-');
        }
        // an empty range (its ends out of order, as in z-a) goes, and the chunks around it join
        let mut k = chunks.len().saturating_sub(1);
        while k > 0 {
            let (a, b) = (chunks[k - 1].last().copied(), chunks[k].first().copied());
            if let (Some(a), Some(b)) = (a, b) {
                if a > b {
                    let tail: Vec<char> = chunks[k][1..].to_vec();
                    chunks[k - 1].pop();
                    chunks[k - 1].extend(tail);
                    chunks.remove(k);
                }
            }
            k -= 1;
        }
    }
    // the regex class: chunks joined by range hyphens, a leading '!' negating
    let mut items: Vec<(char, char)> = Vec::new();
    let mut neg = false;
    let mut first = true;
    let mut pending_range = false;
    for (ci, chunk) in chunks.iter().enumerate() {
        for (x, &c) in chunk.iter().enumerate() {
            if first && ci == 0 && x == 0 && c == '!' {
                neg = true;
                first = false;
                continue;
            }
            first = false;
            if pending_range && x == 0 {
                if let Some(last) = items.last_mut() {
                    last.1 = c;
                }
                pending_range = false;
                continue;
            }
            items.push((c, c));
        }
        if ci + 1 < chunks.len() {
            if chunk.is_empty() || (ci == 0 && neg && chunk.len() == 1) {
                // a hyphen with nothing before it in the class is a literal
                items.push(('-', '-'));
            } else {
                pending_range = true;
            }
        }
    }
    if items.is_empty() {
        return if neg {
            Tok::Any // a negated empty set ("[!]" once empty ranges went) matches any character
        } else {
            Tok::Never
        };
    }
    Tok::Set(neg, items)
}
