use super::table::{ConnTable, ReqTable};
use super::*;
use crate::config::limits::{Per, Rate};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;

fn rate(count: u64, per: Per) -> Rate {
    Rate { count, per }
}

fn req_zone(size: u64, r: Rate) -> Arc<ReqZone> {
    Arc::new(ReqZone::new("z", "$binary_remote_addr", r, size).unwrap())
}

/// A table's memory stays within the zone's `size`, every slot is used, and a million
/// distinct keys through it leave it holding no more keys than it has slots (the
/// least recently seen go), while a key being limited (its TAT far ahead) stays.
#[test]
fn a_million_keys_stay_within_size_and_the_limited_key_stays() {
    let size = 1 << 20;
    let z = req_zone(size, rate(1, Per::Minute));
    assert!(z.memory() <= size, "{} > {size}", z.memory());
    assert!(
        z.memory() > size * 9 / 10,
        "{} wastes most of {size}",
        z.memory()
    );
    let slots = z.slots();
    assert_eq!(slots as u64, (size - zone::OVERHEAD) / 64 * 4);
    let g = Gcra::new(z.interval, 5, true, 0);
    let now = 10 * SEC;
    // The attacker's key: four requests at once, its TAT four minutes ahead.
    let attacker = key::hash_bytes(b"attacker");
    for _ in 0..4 {
        assert_eq!(z.take(attacker, now, &g, 0), Verdict::Pass);
    }
    let tat = z.table().tat(attacker).unwrap();
    assert_eq!(tat, now + 4 * z.interval);
    for i in 0..1_000_000u64 {
        // Fresh keys at the same instant: one request each, one interval ahead.
        assert_eq!(
            z.take(key::hash_bytes(&i.to_le_bytes()), now, &g, (i % 3) as usize),
            Verdict::Pass
        );
    }
    assert_eq!(z.table().occupied(), slots, "every slot holds a key");
    // Each new key took a never-used slot or evicted one.
    assert_eq!(z.keys(), slots as u64);
    assert_eq!(z.keys() + z.evictions(), 1_000_001);
    assert_eq!(z.total(ReqResult::Passed), 0, "counting is the caller's");
    // The limited key kept its state: two more now, then refused.
    assert_eq!(z.table().tat(attacker), Some(tat));
    assert_eq!(z.take(attacker, now, &g, 0), Verdict::Pass);
    assert_eq!(z.take(attacker, now, &g, 0), Verdict::Pass);
    assert_eq!(z.take(attacker, now, &g, 0), Verdict::Reject(z.interval));
}

/// The least recently seen keys are the ones that go.
#[test]
fn eviction_takes_the_least_recently_seen() {
    let z = req_zone(64 << 10, rate(1000, Per::Second));
    let g = Gcra::new(z.interval, 0, false, 0);
    let old: Vec<u64> = (0..50u64).map(|i| key::hash_bytes(&[1, i as u8])).collect();
    for &k in &old {
        z.take(k, SEC, &g, 0);
    }
    for round in 0..20u64 {
        let now = 2 * SEC + round * SEC;
        for i in 0..z.slots() as u64 {
            z.take(
                key::hash_bytes(&(round * 1_000_000 + i).to_le_bytes()),
                now,
                &g,
                0,
            );
        }
    }
    let left = old.iter().filter(|&&k| z.table().tat(k).is_some()).count();
    assert_eq!(left, 0, "old keys still held");
    assert_eq!(z.table().occupied(), z.slots());
}

/// Threads taking the same key at one instant: exactly burst + 1 pass over all of
/// them (the CAS never lets two take the same slot of the bucket).
#[test]
fn concurrent_takes_at_one_instant_admit_exactly_the_burst() {
    for burst in [0u64, 1, 20, 500] {
        let z = req_zone(64 << 10, rate(1, Per::Minute));
        let g = Gcra::new(z.interval, burst, true, 0);
        let passed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (z, passed) = (&z, &passed);
                s.spawn(move || {
                    for _ in 0..5_000 {
                        if z.take(42, 7 * SEC, &g, t) == Verdict::Pass {
                            passed.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(passed.load(Relaxed), burst + 1, "burst {burst}");
    }
}

/// Threads on the clock: the sum admitted over the window is at most
/// rate × time + burst + 1, and at least the burst.
#[test]
fn concurrent_takes_never_over_admit() {
    let z = req_zone(64 << 10, rate(2000, Per::Second));
    let g = Gcra::new(z.interval, 10, true, 0);
    let start = clock(std::time::Instant::now());
    let passed = AtomicU64::new(0);
    let last = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..6 {
            let (z, passed, last) = (&z, &passed, &last);
            s.spawn(move || {
                let until = start + 300 * MS;
                loop {
                    let now = clock(std::time::Instant::now());
                    if now >= until {
                        last.fetch_max(now, Relaxed);
                        break;
                    }
                    if z.take(7, now, &g, t) == Verdict::Pass {
                        passed.fetch_add(1, Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = last.load(Relaxed) - start;
    let bound = elapsed / z.interval + 10 + 1;
    let n = passed.load(Relaxed);
    assert!(n <= bound, "{n} admitted over {elapsed} ns, bound {bound}");
    assert!(n >= 11, "only {n} admitted");
}

/// Zones that take a request, refused by a later zone, give it back; dry runs count
/// without refusing; a delay the worker has no room for refuses.
#[test]
fn several_zones_dry_run_and_delay_room() {
    let a = req_zone(64 << 10, rate(1, Per::Minute));
    let b = req_zone(64 << 10, rate(1, Per::Minute));
    let key = Key::compile("x", &Default::default()).unwrap();
    let rule = |z: &Arc<ReqZone>, burst, nodelay, dry_run| ReqRule {
        zone: z.clone(),
        key: key.clone(),
        gcra: Gcra::new(z.interval, burst, nodelay, 0),
        status: 503,
        dry_run,
        hold: 0,
    };
    let rules = [rule(&a, 5, true, false), rule(&b, 2, true, false)];
    let now = SEC;
    let outcomes: Vec<ReqOutcome> = (0..10)
        .map(|_| check_req(&rules, |_| Some(9), now, 0, true))
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| o.refuse.is_none()).count(),
        3,
        "b's burst"
    );
    assert!(outcomes[3..]
        .iter()
        .all(|o| o.refuse == Some(503) && o.result == Some(ReqResult::Rejected)));
    assert_eq!(outcomes[0].result, Some(ReqResult::Passed));
    // a counted only the three that passed both.
    assert_eq!(a.table().tat(9), Some(now + 3 * a.interval));
    assert_eq!(a.total(ReqResult::Passed), 3);
    assert_eq!(a.total(ReqResult::Rejected), 0);
    assert_eq!(b.total(ReqResult::Rejected), 7);

    // Dry run: nothing refused, the would-be refusals counted and shown.
    let c = req_zone(64 << 10, rate(1, Per::Minute));
    let dry = [rule(&c, 1, true, true)];
    let o: Vec<ReqOutcome> = (0..5)
        .map(|_| check_req(&dry, |_| Some(1), now, 0, true))
        .collect();
    assert!(o.iter().all(|o| o.refuse.is_none() && o.delay == 0));
    assert_eq!(o[1].result, Some(ReqResult::Passed));
    assert_eq!(o[2].result, Some(ReqResult::RejectedDryRun));
    assert_eq!(c.total(ReqResult::RejectedDryRun), 3);
    assert_eq!(c.total(ReqResult::Passed), 2);

    // Delays: without nodelay the second waits one interval; a dry run only says so;
    // a worker without room refuses.
    let d = req_zone(64 << 10, rate(10, Per::Second));
    let delayed = [rule(&d, 3, false, false)];
    assert_eq!(check_req(&delayed, |_| Some(1), now, 0, true).delay, 0);
    let o = check_req(&delayed, |_| Some(1), now, 0, true);
    assert_eq!((o.delay, o.result), (100 * MS, Some(ReqResult::Delayed)));
    let o = check_req(&delayed, |_| Some(1), now, 0, false);
    assert_eq!((o.refuse, o.result), (Some(503), Some(ReqResult::Rejected)));
    assert_eq!(
        o.hold, 0,
        "refused for want of room, not by the rate: never held"
    );
    // ... and gave its place back: the next with room waits two intervals, not three.
    assert_eq!(
        check_req(&delayed, |_| Some(1), now, 0, true).delay,
        200 * MS
    );
    let e = req_zone(64 << 10, rate(10, Per::Second));
    let dry_delay = [rule(&e, 3, false, true)];
    check_req(&dry_delay, |_| Some(1), now, 0, true);
    let o = check_req(&dry_delay, |_| Some(1), now, 0, false);
    assert_eq!((o.delay, o.refuse), (0, None));
    assert_eq!(o.result, Some(ReqResult::DelayedDryRun));
    // An empty key is not limited.
    let o = check_req(&delayed, |_| None, now, 0, true);
    assert_eq!(o, ReqOutcome::default());
}

#[test]
fn connection_counts_up_to_max_and_back() {
    let z = Arc::new(ConnZone::new("c", "$binary_remote_addr", 64 << 10).unwrap());
    assert!(z.memory() <= 64 << 10);
    let g1 = z.acquire(5, 2, 0).unwrap();
    let g2 = z.acquire(5, 2, 1).unwrap();
    assert_eq!(g1.count(), 2);
    assert_eq!(z.acquire(5, 2, 0).err(), Some(ConnRefusal::Over));
    // Another key is counted apart.
    let other = z.acquire(6, 2, 0).unwrap();
    drop(g1);
    assert_eq!(g2.count(), 1);
    let g3 = z.acquire(5, 2, 0).unwrap();
    assert_eq!(z.total(zone::conn_counter::ACTIVE), 3);
    assert_eq!(z.total(zone::conn_counter::PASSED), 4);
    assert_eq!(z.total(zone::conn_counter::REJECTED), 1);
    drop((g2, g3, other));
    assert_eq!(z.total(zone::conn_counter::ACTIVE), 0);
    assert_eq!(z.table().occupied(), 0);
}

/// A slot with connections is never taken by another key; a table full of keys with
/// connections refuses a new key (fail closed) until one closes. Two choices fill most
/// of the table before that.
#[test]
fn a_full_connection_table_refuses_new_keys_and_keeps_counted_ones() {
    let t = ConnTable::new(4096).unwrap();
    let slots = t.slots();
    assert_eq!(slots, 4096 / 128 * 16);
    let mut held = Vec::new();
    let mut first_full = None;
    for k in 0..(slots as u64 * 2) {
        let key = key::hash_bytes(&k.to_le_bytes());
        match t.acquire(key, 1) {
            Ok(slot) => held.push((slot, key)),
            Err(ConnRefusal::Full) => {
                first_full.get_or_insert(held.len());
            }
            Err(ConnRefusal::Over) => panic!("a new key over its max"),
        }
    }
    let first_full = first_full.expect("never full");
    assert!(
        first_full * 100 >= slots * 85,
        "full at {first_full} of {slots} slots"
    );
    assert!(held.len() <= slots);
    assert_eq!(t.occupied(), held.len());
    for &(slot, key) in &held {
        assert!(t.holds(slot, key), "a counted key lost its slot");
        assert_eq!(t.count(slot), 1);
    }
    // Closing one makes room for a key whose candidates include its slot.
    let (slot, _) = held[0];
    t.release(slot);
    assert_eq!(t.count(slot), 0);
    let refit = (0..1_000_000u64)
        .map(|k| key::hash_bytes(&(k + (1 << 40)).to_le_bytes()))
        .find_map(|key| t.acquire(key, 1).ok());
    assert!(refit.is_some());
}

/// Threads acquiring and releasing one key never hold more than `max` at once.
#[test]
fn concurrent_connection_counts_never_exceed_max() {
    let z = Arc::new(ConnZone::new("c", "k", 64 << 10).unwrap());
    let holders = AtomicI64::new(0);
    let peak = AtomicI64::new(0);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (z, holders, peak) = (&z, &holders, &peak);
            s.spawn(move || {
                for _ in 0..20_000 {
                    if let Ok(g) = z.acquire(77, 3, t) {
                        let n = holders.fetch_add(1, Relaxed) + 1;
                        peak.fetch_max(n, Relaxed);
                        assert!(g.count() <= 3);
                        holders.fetch_sub(1, Relaxed);
                        drop(g);
                    }
                }
            });
        }
    });
    assert!(peak.load(Relaxed) <= 3, "peak {}", peak.load(Relaxed));
    assert!(peak.load(Relaxed) >= 1);
    assert_eq!(z.table().occupied(), 0);
    assert_eq!(z.total(zone::conn_counter::ACTIVE), 0);
}

#[test]
fn a_connection_holds_one_count_per_zone() {
    let z = Arc::new(ConnZone::new("c", "k", 64 << 10).unwrap());
    let key = Key::compile("$binary_remote_addr", &Default::default()).unwrap();
    let rule = |max| ConnRule {
        zone: z.clone(),
        key: key.clone(),
        max,
        status: 429,
    };
    let a = Held::default();
    let b = Held::default();
    let c = Held::default();
    assert!(a.check(&rule(2), 1, 0).is_ok());
    // Its next requests: the same count.
    assert!(a.check(&rule(2), 1, 0).is_ok());
    assert!(b.check(&rule(2), 1, 0).is_ok());
    assert_eq!(c.check(&rule(2), 1, 0), Err(ConnRefusal::Over));
    // A location allowing one: the key has two now, so both are refused there.
    assert_eq!(a.check(&rule(1), 1, 0), Err(ConnRefusal::Over));
    // A request for another key moves the count.
    assert!(a.check(&rule(2), 2, 0).is_ok());
    assert_eq!(a.len(), 1);
    assert!(c.check(&rule(2), 1, 0).is_ok());
    drop((a, b, c));
    assert_eq!(z.table().occupied(), 0);
}

#[test]
fn accept_rules_are_the_connection_keyed_limits_every_server_shares() {
    let zones = |text: &str| {
        let cfg = crate::config::parse("t", text).unwrap();
        let known = crate::config::sites::known(&cfg);
        let zones = Zones::build(&cfg, &known, None).unwrap();
        accept_rules(&cfg, &zones)
            .unwrap()
            .iter()
            .map(|r| r.iter().map(|r| r.zone.name.clone()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let head = r#"
[[listen]]
addr = "127.0.0.1:1"
[[listen]]
addr = "127.0.0.1:2"
[[limit_conn_zone]]
name = "addr"
key = "$binary_remote_addr"
[[limit_conn_zone]]
name = "host"
key = "$host"
"#;
    let loc = "[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n";
    let top = format!(
        "limit_conn = [{{ zone = \"addr\", max = 2 }}, {{ zone = \"host\", max = 2 }}]\n{head}{loc}"
    );
    assert_eq!(
        zones(&top),
        [vec!["addr".to_string()], vec!["addr".to_string()]]
    );
    let servers = format!(
        r#"{head}
[[server]]
names = ["a"]
limit_conn = {{ zone = "addr", max = 2 }}
[[server.location]]
prefix = "/"
return = {{ status = 200 }}
[[server]]
names = ["b"]
listen = ["127.0.0.1:2"]
[[server.location]]
prefix = "/"
return = {{ status = 200 }}
"#
    );
    // Listener 1 has only server a; listener 2 also b, which has no limit.
    assert_eq!(
        zones(&servers),
        [vec!["addr".to_string()], Vec::<String>::new()]
    );
    // The key string and the accept-time hash agree with a request's.
    let cfg = crate::config::parse("t", &top).unwrap();
    let z = Zones::build(&cfg, &crate::config::sites::known(&cfg), None).unwrap();
    let rules = accept_rules(&cfg, &z).unwrap();
    let client = crate::vars::Client {
        peer: "192.0.2.1:4000".parse().unwrap(),
        tls: false,
        server_port: 1,
    };
    let mut buf = Vec::new();
    let held = admit(&rules[0], client, &mut buf, 0).unwrap();
    assert_eq!(held.len(), 1);
    let _second = admit(&rules[0], client, &mut buf, 0).unwrap();
    assert_eq!(
        admit(&rules[0], client, &mut buf, 0).err(),
        Some(ConnRefusal::Over)
    );
    drop(held);
    assert!(admit(&rules[0], client, &mut buf, 0).is_ok());
}

#[test]
fn a_reload_keeps_unchanged_zones() {
    let text = |rate: &str| {
        format!(
            r#"
[[listen]]
addr = "127.0.0.1:1"
[[limit_req_zone]]
name = "a"
key = "$binary_remote_addr"
rate = "{rate}"
[[limit_req_zone]]
name = "b"
key = "$binary_remote_addr"
rate = "5r/s"
[[limit_conn_zone]]
name = "c"
key = "$binary_remote_addr"
[[location]]
prefix = "/"
return = {{ status = 200 }}
"#
        )
    };
    let build = |t: &str, prev: Option<&Zones>| {
        let cfg = crate::config::parse("t", t).unwrap();
        Zones::build(&cfg, &crate::config::sites::known(&cfg), prev).unwrap()
    };
    let first = build(&text("10r/s"), None);
    let same = build(&text("10r/s"), Some(&first));
    for i in 0..2 {
        assert!(Arc::ptr_eq(&first.req[i].0, &same.req[i].0));
    }
    assert!(Arc::ptr_eq(&first.conn[0].0, &same.conn[0].0));
    let changed = build(&text("20r/s"), Some(&same));
    assert!(!Arc::ptr_eq(&first.req[0].0, &changed.req[0].0));
    assert!(Arc::ptr_eq(&first.req[1].0, &changed.req[1].0));
}

#[test]
fn keys_know_what_a_connection_tells() {
    let k = |s: &str| Key::compile(s, &Default::default()).unwrap().conn_only();
    assert!(k("$binary_remote_addr"));
    assert!(k("$remote_addr:$server_port/$scheme"));
    assert!(k("static"));
    assert!(!k("$host"));
    assert!(!k("$binary_remote_addr$http_user_agent"));
    assert!(ReqTable::new(0).is_some(), "at least one bucket");
}

/// The address fast path hashes what `$binary_remote_addr` renders, so a count taken
/// at accept and a request's check agree.
#[test]
fn the_address_fast_path_hashes_what_the_template_renders() {
    let known = Default::default();
    let addr = Key::compile("$binary_remote_addr", &known).unwrap();
    assert!(addr.addr_only());
    assert!(!Key::compile("$binary_remote_addr:$server_port", &known)
        .unwrap()
        .addr_only());
    assert!(!Key::compile("x$binary_remote_addr", &known)
        .unwrap()
        .addr_only());
    let req = crate::testutil::parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    let routed = crate::vars::Routed::default();
    let maps = crate::vars::Maps::default();
    let mut buf = Vec::new();
    for peer in ["192.0.2.1:80", "[2001:db8::1]:80", "[::ffff:192.0.2.1]:80"] {
        let peer: std::net::SocketAddr = peer.parse().unwrap();
        let client = crate::vars::Client {
            peer,
            tls: false,
            server_port: 80,
        };
        let ctx = crate::vars::Ctx::new(&req, client, "", &routed, &maps);
        assert_eq!(
            addr.hash(&ctx, &mut buf),
            Some(Key::hash_addr(peer.ip())),
            "{peer}"
        );
    }
}

/// `hold`: a refusal's answer waits until the refusing zone would take a request of the
/// key again, at most `hold`; without `hold` it is answered at once.
#[test]
fn a_refusal_is_held_until_its_key_would_pass_at_most_hold() {
    let z = req_zone(64 << 10, rate(10, Per::Second));
    let key = Key::compile("x", &Default::default()).unwrap();
    let rule = |hold| ReqRule {
        zone: z.clone(),
        key: key.clone(),
        gcra: Gcra::new(z.interval, 0, false, 0),
        status: 429,
        dry_run: false,
        hold,
    };
    let now = SEC;
    let held = [rule(SEC)];
    assert_eq!(check_req(&held, |_| Some(1), now, 0, true).refuse, None);
    let o = check_req(&held, |_| Some(1), now, 0, true);
    assert_eq!((o.refuse, o.hold), (Some(429), 100 * MS), "the next slot");
    let o = check_req(&held, |_| Some(1), now + 30 * MS, 0, true);
    assert_eq!(o.hold, 70 * MS);
    // Capped by `hold`.
    let o = check_req(&[rule(50 * MS)], |_| Some(1), now + 30 * MS, 0, true);
    assert_eq!((o.refuse, o.hold), (Some(429), 50 * MS));
    // None asked for: at once.
    let o = check_req(&[rule(0)], |_| Some(1), now + 30 * MS, 0, true);
    assert_eq!((o.refuse, o.hold), (Some(429), 0));
    // A worker that holds as many requests as it may: at once.
    let o = check_req(&held, |_| Some(1), now + 30 * MS, 0, false);
    assert_eq!((o.refuse, o.hold), (Some(429), 0));
    // Once the slot has come, the request passes.
    assert_eq!(
        check_req(&held, |_| Some(1), now + 100 * MS, 0, true).refuse,
        None
    );
}
