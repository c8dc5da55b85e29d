//! Geo table micro benchmark: `cargo bench -p edge-core --bench geo`.
//!
//! Builds a `network,value` CSV of 1M random prefixes (IPv4: lengths 8-32, most of them
//! /16-/24 as in real country tables; 250 country codes) in a temp directory, and
//! measures:
//! - loading it (`access::geo::load_csv`: read, parse, intern, sort, flatten), the time
//!   a start or a reload spends on it;
//! - lookups at random addresses, two ways: independent lookups (throughput: the CPU
//!   overlaps the cache misses of consecutive lookups, as a worker serving many
//!   clients does) and chained lookups, where each address depends on the previous
//!   result (latency: no overlap, the worst case);
//! - the same for 1M IPv6 prefixes (lengths 19-64 under 2000::/3);
//! - an `allow`/`deny` list of 8 networks and one of 2,000 (a range table);
//! - the machine's memory latency: one load that depends on the one before, at random
//!   in 64 MiB (transparent huge pages asked for, as the tables ask), the floor of a
//!   chained lookup in a table that does not fit the caches. Each lookup is also given
//!   in these loads, which carry across machines better than nanoseconds.
//!
//! Numbers are ns of this thread's CPU time per lookup (time descheduled on a shared
//! machine is left out; cache and TLB pressure from neighbours is not), the best of 5
//! runs; load times are wall-clock, the best of 5.

use edge_core::access::cidr::Cidr;
use edge_core::access::geo::{load_csv, GeoTable};
use edge_core::access::ranges::RangeTable;
use edge_core::access::rules::{AccessList, Action, Matcher, Rule};
use edge_rand::SplitMix64;
use std::fmt::Write as _;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

const PREFIXES: usize = 1_000_000;
const LOOKUPS: usize = 10_000_000;
const RUNS: usize = 5;

fn v4_prefix(rng: &mut SplitMix64) -> (IpAddr, u8) {
    // Real tables are mostly /16 to /24, with some shorter and some hosts.
    let len = match rng.below(100) {
        0..=4 => 8 + rng.below(8) as u8,
        5..=89 => 16 + rng.below(9) as u8,
        _ => 25 + rng.below(8) as u8,
    };
    (IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)), len)
}

fn v6_prefix(rng: &mut SplitMix64) -> (IpAddr, u8) {
    let len = 19 + rng.below(46) as u8;
    let a = (0x2u128 << 125) | (u128::from(rng.next_u64()) << 61) | u128::from(rng.next_u64() >> 3);
    (IpAddr::V6(Ipv6Addr::from(a)), len)
}

fn write_csv(
    path: &std::path::Path,
    rng: &mut SplitMix64,
    gen: fn(&mut SplitMix64) -> (IpAddr, u8),
) {
    let mut text = String::with_capacity(PREFIXES * 24);
    text.push_str("# network,country\n");
    for _ in 0..PREFIXES {
        let (a, len) = gen(rng);
        let net = Cidr::new(a, len);
        let c = rng.below(250) as u8;
        let _ = writeln!(
            text,
            "{net},{}{}",
            char::from(b'A' + c / 26),
            char::from(b'A' + c % 26)
        );
    }
    std::fs::write(path, text).expect("write csv");
}

/// This thread's CPU time: the machine is shared, and time spent descheduled is not
/// the lookup's.
fn cpu_now() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A CPU-time stopwatch.
struct Cpu(std::time::Duration);

impl Cpu {
    fn start() -> Cpu {
        Cpu(cpu_now())
    }
    fn ns_per(&self, n: usize) -> f64 {
        (cpu_now() - self.0).as_nanos() as f64 / n as f64
    }
}

fn best(mut f: impl FnMut() -> f64) -> f64 {
    (0..RUNS).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// (load seconds, table)
fn load(path: &std::path::Path) -> (f64, GeoTable) {
    let mut table = None;
    let secs = best(|| {
        let t0 = Instant::now();
        let t = load_csv(path).expect("load");
        let s = t0.elapsed().as_secs_f64();
        table = Some(t);
        s
    });
    (secs, table.expect("loaded"))
}

/// A pseudo-random address from `x` (an LCG step), IPv6 under 2000::/3.
#[inline]
fn next_addr(x: &mut u64, v6: bool) -> IpAddr {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    if v6 {
        IpAddr::V6(Ipv6Addr::from((0x2u128 << 125) | (u128::from(*x) << 61)))
    } else {
        IpAddr::V4(Ipv4Addr::from((*x >> 32) as u32))
    }
}

/// ns per dependent load at random in 64 MiB: see the module doc.
fn memory_latency() -> f64 {
    const LINES: usize = 1 << 20;
    const HUGE: usize = 2 << 20;
    let bytes = LINES * 64;
    // SAFETY: a fresh private anonymous mapping; no pointer into it exists yet.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert!(map != libc::MAP_FAILED, "mmap failed");
    let at = (map as usize).next_multiple_of(HUGE);
    // SAFETY: `at..at + bytes` lies inside the mapping; MADV_HUGEPAGE only changes how
    // the kernel backs it (an error, THP off, is ignored).
    unsafe { libc::madvise(at as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE) };
    // SAFETY: `at` is 2 MiB-aligned inside the mapping with `bytes` after it, zero-filled
    // (valid usizes), and only this slice refers to it until the munmap below.
    let lines = unsafe { std::slice::from_raw_parts_mut(at as *mut [usize; 8], LINES) };
    // One cycle through every line in random order (Sattolo's shuffle): no prefetcher
    // can guess the next line.
    let mut order: Vec<usize> = (0..LINES).collect();
    let mut rng = SplitMix64::new(0x1a7e);
    for i in (1..LINES).rev() {
        order.swap(i, rng.below(i as u64) as usize);
    }
    for i in 0..LINES {
        lines[order[i]][0] = order[(i + 1) % LINES];
    }
    let ns = best(|| {
        let t0 = Cpu::start();
        let mut p = 0usize;
        for _ in 0..LOOKUPS / 2 {
            p = lines[p][0];
        }
        black_box(p);
        t0.ns_per(LOOKUPS / 2)
    });
    // SAFETY: `map` is the mapping made above, `bytes + HUGE` long; `lines` is not used
    // after this.
    unsafe { libc::munmap(map, bytes + HUGE) };
    ns
}

fn lookups(name: &str, t: &GeoTable, addrs: &[IpAddr], mem: f64) {
    let n = addrs.len();
    let independent = best(|| {
        let t0 = Cpu::start();
        let mut found = 0usize;
        for i in 0..LOOKUPS {
            found += t.lookup(black_box(addrs[i % n])).map_or(0, |v| v.len());
        }
        black_box(found);
        t0.ns_per(LOOKUPS)
    });
    let v6 = addrs[0].is_ipv6();
    let chained = best(|| {
        let t0 = Cpu::start();
        let mut x = 1u64;
        for _ in 0..LOOKUPS {
            // The next address is computed from this result (no memory read): no two
            // lookups overlap.
            let a = next_addr(&mut x, v6);
            let len = t.lookup(a).map_or(1, |v| v.len() as u64 + 1);
            x = x.wrapping_add(len);
        }
        black_box(x);
        t0.ns_per(LOOKUPS)
    });
    println!(
        "{name}: {independent:.1} ns/lookup independent, {chained:.1} ns/lookup chained ({:.2} and {:.2} memory loads)",
        independent / mem,
        chained / mem
    );
}

/// The same IPv4 prefixes in the plain fence tree (what the directory replaces for big
/// tables), for comparison.
fn tree_v4(rng: &mut SplitMix64, addrs: &[IpAddr]) {
    let prefixes: Vec<(u32, u8, u32)> = (0..PREFIXES)
        .map(|_| {
            let (a, len) = v4_prefix(rng);
            let IpAddr::V4(a) = a else { unreachable!() };
            (u32::from(a), len, rng.below(250) as u32)
        })
        .collect();
    let t = RangeTable::build(prefixes);
    let keys: Vec<u32> = addrs
        .iter()
        .map(|a| match a {
            IpAddr::V4(a) => u32::from(*a),
            IpAddr::V6(_) => 0,
        })
        .collect();
    let n = keys.len();
    let independent = best(|| {
        let t0 = Cpu::start();
        let mut found = 0u64;
        for i in 0..LOOKUPS {
            found += u64::from(t.get(black_box(keys[i % n])).unwrap_or(0));
        }
        black_box(found);
        t0.ns_per(LOOKUPS)
    });
    let chained = best(|| {
        let t0 = Cpu::start();
        let mut x = 1u64;
        for _ in 0..LOOKUPS {
            let IpAddr::V4(a) = next_addr(&mut x, false) else {
                unreachable!()
            };
            let v = t.get(u32::from(a)).map_or(1, |v| u64::from(v) + 1);
            x = x.wrapping_add(v);
        }
        black_box(x);
        t0.ns_per(LOOKUPS)
    });
    println!("IPv4 1M prefixes, fence tree only (for comparison): {independent:.1} ns/lookup independent, {chained:.1} ns/lookup chained");
}

fn access(name: &str, nets: usize, rng: &mut SplitMix64, addrs: &[IpAddr]) {
    let mut rules: Vec<Rule<()>> = (0..nets)
        .map(|_| {
            let (a, len) = v4_prefix(rng);
            Rule {
                action: Action::Deny,
                matcher: Matcher::Net(Cidr::new(a, len.max(20))),
            }
        })
        .collect();
    rules.push(Rule {
        action: Action::Allow,
        matcher: Matcher::All,
    });
    let l = AccessList::new(rules);
    let n = addrs.len();
    let ns = best(|| {
        let t0 = Cpu::start();
        let mut denied = 0usize;
        for i in 0..LOOKUPS {
            denied += usize::from(l.check(black_box(addrs[i % n]), |_| false) == Action::Deny);
        }
        black_box(denied);
        t0.ns_per(LOOKUPS)
    });
    println!("{name}: {ns:.1} ns/check");
}

fn main() {
    let mem = memory_latency();
    println!("memory: {mem:.1} ns per dependent load at random in 64 MiB");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = SplitMix64::new(0x6e0_be7c);
    let v4 = dir.path().join("geo4.csv");
    write_csv(&v4, &mut rng, v4_prefix);
    let size = std::fs::metadata(&v4).map(|m| m.len()).unwrap_or(0);
    let (secs, t4) = load(&v4);
    println!(
        "IPv4: {PREFIXES} prefixes ({:.1} MB CSV) loaded in {:.3} s; {} values, {:.1} MB of table",
        size as f64 / 1e6,
        secs,
        t4.values(),
        t4.heap_bytes() as f64 / 1e6
    );
    let addrs: Vec<IpAddr> = (0..1 << 20)
        .map(|_| IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)))
        .collect();
    lookups("IPv4 1M prefixes", &t4, &addrs, mem);
    drop(t4);
    tree_v4(&mut rng, &addrs);

    let v6 = dir.path().join("geo6.csv");
    write_csv(&v6, &mut rng, v6_prefix);
    let (secs, t6) = load(&v6);
    println!(
        "IPv6: {PREFIXES} prefixes loaded in {secs:.3} s; {:.1} MB of table",
        t6.heap_bytes() as f64 / 1e6
    );
    let addrs6: Vec<IpAddr> = (0..1 << 20).map(|_| v6_prefix(&mut rng).0).collect();
    lookups("IPv6 1M prefixes", &t6, &addrs6, mem);
    drop(t6);

    access("access list, 8 networks + deny all", 8, &mut rng, &addrs);
    access(
        "access list, 2000 networks + deny all",
        2000,
        &mut rng,
        &addrs,
    );
}
