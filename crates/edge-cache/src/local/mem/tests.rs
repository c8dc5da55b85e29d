use super::*;
use crate::local::sim::{budget_for, simulate, workloads, Rng};

fn body(n: usize) -> Bytes {
    vec![7u8; n].into()
}

fn tier(policy: Policy, budget: u64) -> MemTier {
    MemTier::new(MemConfig {
        budget,
        max_object: 64 * 1024,
        policy,
    })
}

const ALL: [Policy; 3] = [Policy::S3Fifo, Policy::TinyLfu, Policy::Lru];

#[test]
fn answers_only_for_the_version_the_index_names() {
    for p in ALL {
        let mut t = tier(p, 1 << 20);
        t.insert(1, 10, body(100));
        assert_eq!(t.get(1, 10).as_deref(), Some(&[7u8; 100][..]), "{p:?}");
        assert!(t.get(1, 11).is_none(), "{p:?}: another generation");
        assert_eq!(t.stats().objects, 0, "{p:?}: the stale version is dropped");
        t.insert(1, 10, body(100));
        assert!(t.get(1, 12).is_none(), "{p:?}: refreshed");
        assert_eq!(t.stats().invalidations, 2);
        t.insert(1, 10, body(100));
        t.remove(1);
        assert!(t.get(1, 10).is_none());
        assert_eq!(t.stats().bytes, 0);
    }
}

#[test]
fn rejects_what_is_too_large() {
    for p in ALL {
        let mut t = tier(p, 1 << 20);
        assert!(!t.admissible(64 * 1024 + 1));
        t.insert(1, 1, body(64 * 1024 + 1));
        assert_eq!(t.stats().rejections, 1);
        assert_eq!(t.stats().objects, 0);
        // Larger than the whole budget: refused too.
        let mut small = tier(p, 1000);
        small.insert(1, 1, body(1000));
        assert_eq!(small.stats().objects, 0, "{p:?}");
    }
}

#[test]
fn the_byte_budget_holds_under_a_fill_storm() {
    for p in ALL {
        let budget = 256 * 1024;
        let mut t = tier(p, budget);
        let mut rng = Rng(42);
        for _ in 0..20_000 {
            let k = (rng.next_u64() % 500) as u128;
            let size = (rng.next_u64() % (64 * 1024)) as usize;
            if t.get(k, 1).is_none() {
                t.insert(k, 1, body(size));
            }
            let s = t.stats();
            assert!(s.bytes <= budget, "{p:?}: {} > {budget}", s.bytes);
        }
        let s = t.stats();
        assert!(s.objects > 3 && s.evictions > 0, "{p:?}: {s:?}");
        // Accounting: the lists' totals are exactly what the map holds.
        let held: u64 = t.map.values().map(|&i| t.slots[i as usize].weight).sum();
        assert_eq!(held, s.bytes, "{p:?}");
    }
}

#[test]
fn s3fifo_keeps_an_object_hit_in_the_small_queue() {
    // 10 objects of ~1 KiB fit; object 0 is hit once, then 30 one-hit wonders pass.
    let mut t = tier(Policy::S3Fifo, 10 * (1024 + ENTRY_OVERHEAD));
    t.insert(0, 1, body(1024));
    assert!(t.get(0, 1).is_some());
    for i in 1..40u128 {
        t.insert(i, 1, body(1024));
    }
    assert!(t.contains(0, 1), "promoted to main, survives the wonders");
    assert!(!t.contains(1, 1));
}

#[test]
fn policies_match_or_beat_lru_and_keep_the_hot_set_through_a_scan() {
    for w in workloads() {
        let budget = budget_for(&w);
        let lru = simulate(Policy::Lru, budget, &w);
        for p in [Policy::S3Fifo, Policy::TinyLfu] {
            let r = simulate(p, budget, &w);
            assert!(
                r.hit_ratio >= lru.hit_ratio,
                "{}: {p:?} {:.4} < lru {:.4}",
                w.name,
                r.hit_ratio,
                lru.hit_ratio
            );
            if w.scan {
                assert!(
                    r.hot_after_scan >= 90,
                    "{}: {p:?} kept {} of the 100 hottest",
                    w.name,
                    r.hot_after_scan
                );
            }
        }
        if w.scan {
            assert!(lru.hot_after_scan < 10, "LRU is flushed by a scan");
        }
    }
}
