//! What a template is rendered against: [`Ctx`], built by a handler from the exchange
//! and the connection, and [`Captures`], the regex captures routing left behind.

use edge_http::RequestHead;
use std::net::SocketAddr;
use std::sync::Arc;

/// Facts of the client connection.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub peer: SocketAddr,
    /// The listener terminates TLS (`$scheme` is `https`).
    pub tls: bool,
    /// The listener's port (`$server_port`).
    pub server_port: u16,
}

/// Log-time facts, for `$status`, `$upstream_cache_status`, `$time_iso8601`,
/// `$time_local`, `$body_bytes_sent`, `$bytes_sent`, `$request_length`,
/// `$request_time` and `$upstream_response_time` (an access log fills them once the
/// response is out).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogFacts<'a> {
    pub status: u16,
    pub cache_status: Option<&'static str>,
    /// The time, already formatted (`2024-05-01T12:00:00+00:00`).
    pub time_iso8601: &'a str,
    /// The time, already formatted (`01/May/2024:12:00:00 +0000`).
    pub time_local: &'a str,
    pub body_bytes_sent: u64,
    /// Head and body bytes sent to the client.
    pub bytes_sent: u64,
    /// Request head bytes, and body bytes read.
    pub request_length: u64,
    /// From the first byte of the request head to the end of the response.
    pub request_time: std::time::Duration,
    /// Time spent on the upstream exchange; None when the request went to none.
    pub upstream_response_time: Option<std::time::Duration>,
}

/// Where `[[map]]` variables get their values ([`super::Maps`]); a trait so that this
/// module needs no map type (maps hold templates, which render with a [`Ctx`]).
pub trait MapValues {
    /// Appends map `i`'s value for this request.
    fn write(&self, i: usize, ctx: &Ctx<'_>, out: &mut Vec<u8>);
    /// Appends `[[geo]]` `i`'s value for this request (nothing by default: a table of
    /// maps only).
    fn write_geo(&self, i: usize, ctx: &Ctx<'_>, out: &mut Vec<u8>) {
        let _ = (i, ctx, out);
    }
}

/// Everything a template may read for one request.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub req: &'a RequestHead,
    pub client: Client,
    /// The server's first name (`$server_name`, and `$host` without a Host).
    pub server_name: &'a str,
    /// `$request_uri`: the original path and query.
    pub request_uri: &'a str,
    /// `$uri`: the current path.
    pub uri: &'a str,
    /// `$args`: the current query.
    pub args: Option<&'a str>,
    pub caps: &'a Captures,
    pub maps: &'a dyn MapValues,
    pub log: Option<&'a LogFacts<'a>>,
    /// `$limit_req_status` ([`Routed::limit_req`]).
    pub limit_req_status: Option<&'static str>,
    /// How many `[[map]]` evaluations are nested (a map whose value names a map): bounded
    /// so a cycle renders empty instead of looping.
    pub(super) depth: u8,
}

impl<'a> Ctx<'a> {
    /// The context of `req` as it is now: `$uri` (the normalized path routing kept in
    /// `routed`, else the target's path) and `$args` from its target, and
    /// `$request_uri` from `routed` (the URI before a rewrite) or the target.
    pub fn new(
        req: &'a RequestHead,
        client: Client,
        server_name: &'a str,
        routed: &'a Routed,
        maps: &'a dyn MapValues,
    ) -> Ctx<'a> {
        let (path, args) = req.path_query();
        Ctx {
            req,
            client,
            server_name,
            request_uri: routed
                .original_uri
                .as_deref()
                .unwrap_or_else(|| req.path_and_query()),
            uri: routed.uri.as_deref().unwrap_or(path),
            args,
            caps: &routed.caps,
            maps,
            log: None,
            limit_req_status: routed.limit_req,
            depth: 0,
        }
    }

    /// The same context with another current URI (path and query), e.g. a URI named in
    /// a response's `Location`.
    pub fn with_uri(mut self, pq: &'a str) -> Ctx<'a> {
        let (p, q) = match pq.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (pq, None),
        };
        self.uri = p;
        self.args = q;
        self
    }

    /// The same context with another current path (`$uri`) and query (`$args`).
    pub fn with_path(mut self, path: &'a str, args: Option<&'a str>) -> Ctx<'a> {
        self.uri = path;
        self.args = args;
        self
    }
}

/// What routing learned about a request, kept on the exchange for the handlers: the
/// server that took it, the regex captures, and the target it came with when a rewrite
/// changed it. The default (no captures, no rewrite) allocates nothing.
#[derive(Debug, Default)]
pub struct Routed {
    /// Index of the server in the site table.
    pub server: u16,
    pub caps: Captures,
    /// The request's path and query before the first rewrite (`$request_uri`).
    pub original_uri: Option<String>,
    /// The slot of the access log that applies (`state::logs`): the server's once one
    /// took the request, then the location's; None: the top level's.
    pub log: Option<u16>,
    /// `$uri`, the normalized path ([`super::normalize_uri`]) of the current target, when
    /// it differs from the target's path (None: the path is already normal).
    pub uri: Option<Box<str>>,
    /// What the location's `limit_req` zones did (`$limit_req_status`: `PASSED`,
    /// `DELAYED`, `REJECTED`, `DELAYED_DRY_RUN`, `REJECTED_DRY_RUN`); None: none applied.
    pub limit_req: Option<&'static str>,
}

/// One regex match: a copy of the subject and the group spans.
#[derive(Debug, Clone)]
struct Cap {
    subject: Box<str>,
    spans: Vec<Option<(usize, usize)>>,
    /// Shared with the table that holds the regex: keeping a match costs no regex
    /// clone (a `Regex` clone builds a new cache pool: several allocations).
    re: Arc<regex::Regex>,
}

impl Cap {
    fn group(&self, i: usize) -> Option<&str> {
        let (s, e) = (*self.spans.get(i)?)?;
        self.subject.get(s..e)
    }
}

/// The captures of the server-name regex and of the latest location or rewrite regex.
/// `$1`..`$9` read the latest match (else the server's), `$name` the latest match that
/// has the group, as nginx does. A rewrite regex that does not match clears the numbered
/// ones (nginx sets `r->ncaptures = 0` there); named ones stay.
#[derive(Debug, Clone, Default)]
pub struct Captures {
    server: Option<Cap>,
    latest: Option<Cap>,
    /// `$0`..`$9` read empty until the next match with groups.
    numbered_cleared: bool,
}

impl Captures {
    fn cap(re: &Arc<regex::Regex>, subject: &str, c: &regex::Captures<'_>) -> Cap {
        Cap {
            subject: subject.into(),
            spans: c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect(),
            re: Arc::clone(re),
        }
    }

    /// Keeps the captures of the server-name regex.
    pub fn set_server(&mut self, re: &Arc<regex::Regex>, subject: &str, c: &regex::Captures<'_>) {
        self.server = Some(Self::cap(re, subject, c));
        self.numbered_cleared = false;
    }

    /// Keeps the captures of a location or rewrite regex (replacing the previous one).
    pub fn set_latest(&mut self, re: &Arc<regex::Regex>, subject: &str, c: &regex::Captures<'_>) {
        self.latest = Some(Self::cap(re, subject, c));
        self.numbered_cleared = false;
    }

    /// A rewrite's regex did not match: `$0`..`$9` are empty until the next match with
    /// groups, as in nginx (named captures keep their values).
    pub fn clear_numbered(&mut self) {
        self.numbered_cleared = true;
    }

    pub fn numbered(&self, n: usize) -> Option<&str> {
        if self.numbered_cleared {
            return None;
        }
        self.latest.as_ref().or(self.server.as_ref())?.group(n)
    }

    pub fn named(&self, name: &str) -> Option<&str> {
        [&self.latest, &self.server]
            .into_iter()
            .flatten()
            .find_map(|c| {
                let i = c.re.capture_names().position(|n| n == Some(name))?;
                c.group(i)
            })
    }

    pub fn is_empty(&self) -> bool {
        self.server.is_none() && self.latest.is_none()
    }
}

/// A request host as routing compares it: without the port (`[v6]:port` keeps its
/// brackets) and without a trailing dot. Case is left alone (compare ignoring it).
pub fn normalize_host(h: &str) -> &str {
    // Bytes, not `str` searches: this runs once or twice per request.
    let h = h.trim_ascii();
    let b = h.as_bytes();
    let end = if b.first() == Some(&b'[') {
        b.iter().position(|&c| c == b']').map_or(b.len(), |i| i + 1)
    } else {
        b.iter().rposition(|&c| c == b':').unwrap_or(b.len())
    };
    // ':' and ']' are ASCII: `end` is a char boundary.
    let h = &h[..end];
    h.strip_suffix('.').unwrap_or(h)
}
