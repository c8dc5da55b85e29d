//! What a location applies ([`RouteLimits`]), compiled against the zones, and the
//! decisions: [`check_req`] for a request's `limit_req` list, [`Held`] for the
//! connection counts a connection holds, [`accept_rules`] and [`admit`] for the
//! counts taken when a connection is accepted.

use super::gcra::{Gcra, Verdict};
use super::key::Key;
use super::table::ConnRefusal;
use super::zone::{ConnGuard, ConnZone, ReqResult, ReqZone, Zones};
use crate::config::limits::{LimitConnList, LimitReqList, MAX_RULES};
use crate::config::Config;
use crate::vars::{Client, Ctx, MapValues, Routed};
use std::cell::RefCell;
use std::sync::Arc;

/// One `limit_req` entry, compiled.
pub struct ReqRule {
    pub zone: Arc<ReqZone>,
    pub key: Key,
    pub gcra: Gcra,
    pub status: u16,
    pub dry_run: bool,
    /// The longest a refusal's answer waits for the key to conform (ns; 0: none).
    pub hold: u64,
}

/// One `limit_conn` entry, compiled.
#[derive(Clone)]
pub struct ConnRule {
    pub zone: Arc<ConnZone>,
    pub key: Key,
    pub max: u64,
    pub status: u16,
}

/// The limits of a location (its own, else inherited: see `config::limits`).
#[derive(Default)]
pub struct RouteLimits {
    pub req: Box<[ReqRule]>,
    pub conn: Box<[ConnRule]>,
}

impl RouteLimits {
    pub fn compile(
        req: &LimitReqList,
        conn: &LimitConnList,
        zones: &Zones,
    ) -> Result<RouteLimits, String> {
        let req = match req {
            None => Box::default(),
            Some(list) => list
                .get_ref()
                .0
                .iter()
                .take(MAX_RULES)
                .map(|r| {
                    let (zone, key) = zones
                        .req_zone(&r.zone)
                        .ok_or_else(|| format!("no [[limit_req_zone]] named {:?}", r.zone))?;
                    Ok(ReqRule {
                        gcra: Gcra::new(zone.interval, r.burst, r.nodelay, r.delay),
                        zone: zone.clone(),
                        key: key.clone(),
                        status: r.status,
                        dry_run: r.dry_run,
                        hold: u64::try_from(r.hold.0.as_nanos()).unwrap_or(u64::MAX),
                    })
                })
                .collect::<Result<_, String>>()?,
        };
        let conn = match conn {
            None => Box::default(),
            Some(list) => conn_rules(&list.get_ref().0, zones)?.into_boxed_slice(),
        };
        Ok(RouteLimits { req, conn })
    }

    pub fn is_empty(&self) -> bool {
        self.req.is_empty() && self.conn.is_empty()
    }
}

fn conn_rules(
    list: &[crate::config::limits::LimitConnCfg],
    zones: &Zones,
) -> Result<Vec<ConnRule>, String> {
    list.iter()
        .take(MAX_RULES)
        .map(|c| {
            let (zone, key) = zones
                .conn_zone(&c.zone)
                .ok_or_else(|| format!("no [[limit_conn_zone]] named {:?}", c.zone))?;
            Ok(ConnRule {
                zone: zone.clone(),
                key: key.clone(),
                max: c.max,
                status: c.status,
            })
        })
        .collect()
}

/// What a request's `limit_req` list decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqOutcome {
    /// `$limit_req_status` (None: no zone had a key for the request).
    pub result: Option<ReqResult>,
    /// Refuse with this status.
    pub refuse: Option<u16>,
    /// Serve after this many nanoseconds (0: now).
    pub delay: u64,
    /// Refused: answer after this many nanoseconds (0: at once), the time until the
    /// refusing zone would take a request of this key, at most its `hold`.
    pub hold: u64,
}

/// Applies `rules` to a request at `now` (nanoseconds of [`super::zone::clock`]);
/// `key_of` renders and hashes a rule's key (None: empty, that zone does not apply).
///
/// nginx's semantics: every zone must take the request; a dry-run zone never refuses
/// or delays (its would-be result is counted and shown); the delay is the longest any
/// zone asks; and when one zone refuses, the zones that had taken the request give it
/// back (nginx counts a request in its zones only when all of them take it). When the
/// request would be delayed but `may_delay` is false (the worker holds as many delayed
/// requests as it may), it is refused by the zone that asked for the delay; a refusal
/// is then answered at once, whatever the zone's `hold`.
pub fn check_req(
    rules: &[ReqRule],
    mut key_of: impl FnMut(&Key) -> Option<u64>,
    now: u64,
    worker: usize,
    may_delay: bool,
) -> ReqOutcome {
    let n = rules.len().min(MAX_RULES);
    // Per rule: its key's hash and verdict, once evaluated.
    let mut seen: [Option<(u64, Verdict)>; MAX_RULES] = [None; MAX_RULES];
    let mut refuse_at = None;
    let (mut delay, mut delay_at) = (0u64, 0usize);
    for (i, r) in rules[..n].iter().enumerate() {
        let Some(h) = key_of(&r.key) else {
            continue;
        };
        let v = r.zone.take(h, now, &r.gcra, worker);
        seen[i] = Some((h, v));
        match v {
            Verdict::Reject(_) if !r.dry_run => {
                refuse_at = Some(i);
                break;
            }
            Verdict::Delay(d) if !r.dry_run && d > delay => {
                delay = d;
                delay_at = i;
            }
            _ => {}
        }
    }
    if refuse_at.is_none() && delay > 0 && !may_delay {
        refuse_at = Some(delay_at);
    }
    if let Some(k) = refuse_at {
        for (r, s) in rules[..n].iter().zip(&seen) {
            match s {
                Some((h, Verdict::Pass | Verdict::Delay(_))) => r.zone.give_back(*h),
                Some((_, Verdict::Reject(_))) if r.dry_run => {
                    r.zone.count(worker, ReqResult::RejectedDryRun)
                }
                _ => {}
            }
        }
        rules[k].zone.count(worker, ReqResult::Rejected);
        // Refused for want of room to delay (not by the rate), or held for as long as
        // the zone says, if the worker has room to hold it (as for a delay).
        let hold = match seen[k] {
            Some((_, Verdict::Reject(retry))) if may_delay => retry.min(rules[k].hold),
            _ => 0,
        };
        return ReqOutcome {
            result: Some(ReqResult::Rejected),
            refuse: Some(rules[k].status),
            delay: 0,
            hold,
        };
    }
    let mut out = ReqOutcome {
        delay,
        ..ReqOutcome::default()
    };
    let (mut dry_reject, mut dry_delay, mut any) = (false, false, false);
    for (r, s) in rules[..n].iter().zip(&seen) {
        let Some((_, v)) = s else {
            continue;
        };
        any = true;
        let res = match (v, r.dry_run) {
            (Verdict::Pass, _) => ReqResult::Passed,
            (Verdict::Delay(_), false) => ReqResult::Delayed,
            (Verdict::Delay(_), true) => {
                dry_delay = true;
                ReqResult::DelayedDryRun
            }
            (Verdict::Reject(_), _) => {
                dry_reject = true;
                ReqResult::RejectedDryRun
            }
        };
        r.zone.count(worker, res);
    }
    out.result = any.then_some(if dry_reject {
        ReqResult::RejectedDryRun
    } else if delay > 0 {
        ReqResult::Delayed
    } else if dry_delay {
        ReqResult::DelayedDryRun
    } else {
        ReqResult::Passed
    });
    out
}

/// Most zones a connection holds counts in at once; a connection that reaches a ninth
/// gives back its oldest.
pub const MAX_HELD: usize = 8;

/// The connection counts a connection holds (at most one per zone): taken when it is
/// accepted ([`admit`]) or at its first request to a location with `limit_conn`
/// ([`Held::check`]), given back when it closes (the guards drop with the connection:
/// an HTTP/1.1 connection's `Conn`, parked or not, an HTTP/2 connection's shared
/// state).
#[derive(Default)]
pub struct Held(RefCell<Vec<ConnGuard>>);

impl Held {
    pub fn new(guards: Vec<ConnGuard>) -> Held {
        Held(RefCell::new(guards))
    }

    /// Takes over `other`'s counts.
    pub fn absorb(&self, other: Held) {
        self.0.borrow_mut().extend(other.0.into_inner());
    }

    /// Zones this connection counts in.
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }

    /// A request of this connection whose `rule` key hashes to `key`: passes when the
    /// connection holds a count for that key in the zone and the key has at most
    /// `max` connections (a location may allow fewer than the one that counted it),
    /// or when a count can be taken now. A connection holding the zone's count for
    /// another key (its requests come from several clients through a proxy) gives it
    /// back first: a connection counts for the client of its latest request.
    pub fn check(&self, rule: &ConnRule, key: u64, worker: usize) -> Result<(), ConnRefusal> {
        let mut held = self.0.borrow_mut();
        if let Some(i) = held.iter().position(|g| Arc::ptr_eq(g.zone(), &rule.zone)) {
            if held[i].key() == key {
                if held[i].count() <= rule.max {
                    return Ok(());
                }
                rule.zone.refused(worker, ConnRefusal::Over);
                return Err(ConnRefusal::Over);
            }
            held.remove(i);
        }
        if held.len() >= MAX_HELD {
            held.remove(0);
        }
        held.push(rule.zone.acquire(key, rule.max, worker)?);
        Ok(())
    }
}

/// Per `[[listen]]` (config order), the `limit_conn` entries applied when a connection
/// is accepted: those of the server level (a server's own, or the top level's) that
/// every server answering on the listener applies, with a key of connection facts only
/// (a server is chosen by the request's host, so a limit that only some servers of a
/// listener apply cannot be applied before the request).
pub fn accept_rules(cfg: &Config, zones: &Zones) -> Result<Vec<Vec<ConnRule>>, String> {
    let implicit = !cfg.location.is_empty() || cfg.server.is_empty();
    let mut out = Vec::with_capacity(cfg.listen.len());
    for l in &cfg.listen {
        let addr = l.addr.get_ref();
        let mut lists = Vec::new();
        if implicit {
            lists.push(
                cfg.limit_conn
                    .as_ref()
                    .map(|c| &c.get_ref().0[..])
                    .unwrap_or(&[]),
            );
        }
        for s in &cfg.server {
            let here = s.listen.as_ref().is_none_or(|a| a.get_ref().contains(addr));
            if here {
                lists.push(
                    s.limit_conn
                        .as_ref()
                        .map(|c| &c.get_ref().0[..])
                        .unwrap_or(&[]),
                );
            }
        }
        let Some((first, rest)) = lists.split_first() else {
            out.push(Vec::new());
            continue;
        };
        let common: Vec<_> = first
            .iter()
            .filter(|c| rest.iter().all(|l| l.contains(c)))
            .cloned()
            .collect();
        let rules: Vec<ConnRule> = conn_rules(&common, zones)?
            .into_iter()
            .filter(|r| r.key.conn_only())
            .collect();
        out.push(rules);
    }
    Ok(out)
}

/// Takes the accept-time counts of a new connection whose client is `client`: the
/// guards, or the first rule's refusal (the counts taken before it are given back).
/// A key that renders empty counts nothing.
pub fn admit(
    rules: &[ConnRule],
    client: Client,
    buf: &mut Vec<u8>,
    worker: usize,
) -> Result<Held, ConnRefusal> {
    // The keys read connection facts only: a request with nothing in it will do.
    let req = edge_http::RequestHead {
        method: edge_http::Method::Get,
        target: String::new(),
        version: edge_http::Version::Http11,
        headers: Default::default(),
        body: edge_http::BodyKind::Empty,
        keep_alive: false,
        expect_continue: false,
    };
    let routed = Routed::default();
    let ctx = Ctx::new(&req, client, "", &routed, &NoMaps);
    let mut guards = Vec::with_capacity(rules.len());
    for r in rules {
        let h = if r.key.addr_only() {
            Some(Key::hash_addr(client.peer.ip()))
        } else {
            r.key.hash(&ctx, buf)
        };
        let Some(h) = h else {
            continue;
        };
        guards.push(r.zone.acquire(h, r.max, worker)?);
    }
    Ok(Held::new(guards))
}

/// Maps for a context whose templates read none.
struct NoMaps;

impl MapValues for NoMaps {
    fn write(&self, _: usize, _: &Ctx<'_>, _: &mut Vec<u8>) {}
}
