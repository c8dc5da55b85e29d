//! The LRU order, the expiry, and a randomized check against a plain model; and
//! (ignored) the micro-benchmark of docs/results/idle-parking.md, old against new.

use super::*;

fn at(origin: Instant, ticks: u64) -> Instant {
    origin + RESOLUTION * ticks as u32
}

fn drain_oldest<T>(q: &mut IdleQueue<T>) -> Vec<T> {
    std::iter::from_fn(|| q.pop_oldest()).collect()
}

fn expired<T>(q: &mut IdleQueue<T>, now: Instant) -> Vec<T> {
    let mut out = Vec::new();
    let n = q.expire(now, |t| out.push(t));
    assert_eq!(n, out.len());
    out
}

#[test]
fn the_oldest_goes_first_whatever_the_deadlines() {
    let t0 = Instant::now();
    let mut q = IdleQueue::new(t0);
    // Parked in this order, with deadlines in another (a shorter header timeout, a
    // reload that changed keepalive_timeout).
    for (i, d) in [50u64, 10, 30, 20].into_iter().enumerate() {
        q.insert(i, at(t0, d));
    }
    assert_eq!(q.len(), 4);
    assert_eq!(drain_oldest(&mut q), [0, 1, 2, 3]);
    assert_eq!(q.len(), 0);
    assert_eq!(q.pop_oldest(), None);
}

#[test]
fn unpark_from_the_middle_the_ends_and_re_park() {
    let t0 = Instant::now();
    let mut q = IdleQueue::new(t0);
    let keys: Vec<Key> = (0..6).map(|i| q.insert(i, at(t0, 100))).collect();
    assert_eq!(q.remove(keys[3]), Some(3), "middle");
    assert_eq!(q.remove(keys[0]), Some(0), "oldest");
    assert_eq!(q.remove(keys[5]), Some(5), "newest");
    assert_eq!(q.remove(keys[3]), None, "twice");
    assert_eq!(q.len(), 3);
    // Re-parked (resumed, served, idle again): the newest now, under a new name.
    let again = q.insert(3, at(t0, 100));
    assert_eq!(again.slot, keys[5].slot, "a freed slot is reused");
    assert_ne!(again.gen, keys[5].gen);
    assert_eq!(q.remove(keys[5]), None, "a stale name finds nothing");
    assert_eq!(q.get_mut(keys[5]), None);
    assert_eq!(q.get_mut(again), Some(&mut 3));
    assert_eq!(drain_oldest(&mut q), [1, 2, 4, 3]);
}

#[test]
fn expiry_takes_what_is_due_never_early_at_most_one_resolution_late() {
    let t0 = Instant::now();
    let mut q = IdleQueue::new(t0);
    let ms = Duration::from_millis;
    let a = q.insert("a", t0 + ms(1000));
    q.insert("b", t0 + ms(250)); // rounded up to 300 ms
    q.insert("c", t0 + ms(2000));
    q.insert("d", t0 + ms(300));
    assert!(expired(&mut q, t0 + ms(249)).is_empty());
    assert!(
        expired(&mut q, t0 + ms(299)).is_empty(),
        "b: not before its tick"
    );
    let mut got = expired(&mut q, t0 + ms(300));
    got.sort();
    assert_eq!(got, ["b", "d"]);
    assert!(expired(&mut q, t0 + ms(300)).is_empty(), "once");
    assert_eq!(q.remove(a), Some("a"), "unparked before its deadline");
    assert!(expired(&mut q, t0 + ms(1500)).is_empty());
    assert_eq!(expired(&mut q, t0 + ms(5000)), ["c"]);
    assert_eq!(q.len(), 0);
    // A deadline already past (or in a tick expired already): due at the next call.
    q.insert("late", t0 + ms(4000));
    assert!(expired(&mut q, t0 + ms(5000)).is_empty(), "tick 50 is done");
    assert_eq!(expired(&mut q, t0 + ms(5100)), ["late"]);
    q.insert("before origin", t0 - ms(10));
    assert_eq!(expired(&mut q, t0 + ms(5200)), ["before origin"]);
}

#[test]
fn deadlines_beyond_one_turn_wait_their_turn() {
    let t0 = Instant::now();
    let mut q = IdleQueue::new(t0);
    let turn = WHEEL as u64;
    q.insert("near", at(t0, 10));
    q.insert("one turn on", at(t0, 10 + turn)); // same bucket
    q.insert("three turns on", at(t0, 10 + 3 * turn));
    assert_eq!(expired(&mut q, at(t0, 10)), ["near"]);
    assert!(expired(&mut q, at(t0, 9 + turn)).is_empty());
    assert_eq!(expired(&mut q, at(t0, 10 + turn)), ["one turn on"]);
    // A call after a long pause walks each bucket once and takes only what is due.
    assert!(expired(&mut q, at(t0, 9 + 3 * turn)).is_empty());
    assert_eq!(expired(&mut q, at(t0, 20 + 5 * turn)), ["three turns on"]);
    assert_eq!(q.len(), 0);
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Many entries and random parks, unparks (from anywhere), reclaims and ticks, against
/// a model that is a plain list in park order: the same entries come out, in the same
/// order for reclaims, at the same ticks for expiry.
#[test]
fn many_entries_match_a_plain_model() {
    let t0 = Instant::now();
    let mut q = IdleQueue::new(t0);
    let mut model: Vec<(u64, u64, Key)> = Vec::new(); // (id, due tick, key), oldest first
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut now = 0u64;
    let mut next_id = 0u64;
    for round in 0..400 {
        for _ in 0..rng.below(600) {
            // Timeouts from 0 to a bit over two turns of the wheel.
            let due = now + rng.below(2 * WHEEL as u64 + 100);
            let key = q.insert(next_id, at(t0, due));
            model.push((next_id, due.max(now + 1), key));
            next_id += 1;
        }
        for _ in 0..rng.below(200).min(model.len() as u64) {
            let i = rng.below(model.len() as u64) as usize;
            let (id, _, key) = model.remove(i);
            assert_eq!(q.remove(key), Some(id));
        }
        if round % 7 == 0 {
            let n = rng.below(40) as usize;
            let want: Vec<u64> = model.drain(..n.min(model.len())).map(|e| e.0).collect();
            let got: Vec<u64> = (0..want.len()).filter_map(|_| q.pop_oldest()).collect();
            assert_eq!(got, want, "round {round}: oldest first");
        }
        now += rng.below(if round % 50 == 0 {
            3 * WHEEL as u64
        } else {
            30
        });
        let mut got = expired(&mut q, at(t0, now));
        got.sort_unstable();
        let mut want: Vec<u64> = model.iter().filter(|e| e.1 <= now).map(|e| e.0).collect();
        want.sort_unstable();
        model.retain(|e| e.1 > now);
        assert_eq!(got, want, "round {round}: expired at tick {now}");
        assert_eq!(q.len(), model.len());
    }
    assert!(next_id > 50_000, "{next_id} entries went through");
    let rest: Vec<u64> = drain_oldest(&mut q);
    assert_eq!(rest, model.iter().map(|e| e.0).collect::<Vec<_>>());
}

/// The parking of before issue 29, kept as the benchmark's baseline: a slab of
/// optional entries with a deadline; the tick scanned every slot, and making room
/// collected every entry and partially sorted them by deadline.
struct ScanParking<T> {
    slots: Vec<Option<(T, Instant, u32)>>,
    gens: Vec<u32>,
    free: Vec<u32>,
}

impl<T> ScanParking<T> {
    fn new() -> Self {
        ScanParking {
            slots: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: T, deadline: Instant) -> (u32, u32) {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
        let gen = self.gens[slot as usize];
        self.slots[slot as usize] = Some((item, deadline, gen));
        (slot, gen)
    }

    fn take(&mut self, slot: u32) -> Option<T> {
        let e = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(e.0)
    }

    fn expire(&mut self, now: Instant) -> usize {
        let due: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, e)| e.as_ref().is_some_and(|e| e.1 <= now))
            .map(|(i, _)| i as u32)
            .collect();
        due.into_iter().filter(|&i| self.take(i).is_some()).count()
    }

    fn close_oldest(&mut self, n: usize) -> usize {
        let mut due: Vec<(Instant, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (e.1, i as u32)))
            .collect();
        let n = n.min(due.len());
        if n == 0 {
            return 0;
        }
        due.select_nth_unstable(n - 1);
        due[..n]
            .iter()
            .filter(|&&(_, i)| self.take(i).is_some())
            .count()
    }
}

/// What a parked connection's entry weighs (the socket, peer and counters).
type Payload = [u8; std::mem::size_of::<crate::http::session::Parked>()];

/// docs/results/idle-parking.md: with `N` connections parked (100,000), the cost of the
/// once-a-second tick when nothing is due (an idle worker's steady state) and of one
/// reclaim at `worker_connections` (close the 32 longest idle, park 32 new ones), old
/// and new side by side in one run. Run with
/// `cargo test --release -p edge-core --lib idle_queue::tests::bench -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: run it in release, by hand"]
fn bench_old_scan_against_lru_and_wheel() {
    const N: usize = 100_000;
    const BATCH: usize = 32;
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let t0 = Instant::now();
    let timeout = Duration::from_secs(75);
    // Parked over 75 s, due 100 to 175 s from now: none is due during the minute of
    // ticks measured (a worker whose idle connections outlive the measurement).
    let deadline = |i: usize| t0 + Duration::from_secs(100) + timeout * (i as u32) / N as u32;
    let payload: Payload = [7; std::mem::size_of::<Payload>()];
    let time = |f: &mut dyn FnMut()| {
        let s = Instant::now();
        f();
        s.elapsed()
    };
    println!(
        "entry payload {} bytes; {N} parked; {rounds} rounds",
        std::mem::size_of::<Payload>()
    );
    let (mut old_tick, mut new_tick, mut old_rec, mut new_rec) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let mut old = ScanParking::new();
        let mut new = IdleQueue::new(t0);
        for i in 0..N {
            old.insert(payload, deadline(i));
            new.insert(payload, deadline(i));
        }
        // A minute of the once-a-second tick, nothing due.
        let reps = 60u32;
        old_tick.push(
            time(&mut || {
                for k in 1..=reps {
                    assert_eq!(old.expire(t0 + Duration::from_secs(k.into())), 0);
                }
            }) / reps,
        );
        new_tick.push(
            time(&mut || {
                for k in 1..=reps {
                    assert_eq!(new.expire(t0 + Duration::from_secs(k.into()), drop), 0);
                }
            }) / reps,
        );
        // Reclaims: close 32, park 32 new ones (the worker stays full).
        let reps = 200u32;
        let later = t0 + timeout * 3;
        old_rec.push(
            time(&mut || {
                for _ in 0..reps {
                    assert_eq!(old.close_oldest(BATCH), BATCH);
                    for _ in 0..BATCH {
                        old.insert(payload, later);
                    }
                }
            }) / reps,
        );
        new_rec.push(
            time(&mut || {
                for _ in 0..reps {
                    for _ in 0..BATCH {
                        assert!(new.pop_oldest().is_some());
                    }
                    for _ in 0..BATCH {
                        new.insert(payload, later);
                    }
                }
            }) / reps,
        );
        assert_eq!((old.slots.len() - old.free.len(), new.len()), (N, N));
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (ot, nt, or, nr) = (
        median(&mut old_tick),
        median(&mut new_tick),
        median(&mut old_rec),
        median(&mut new_rec),
    );
    println!(
        "tick, none due: old {ot:?}  new {nt:?}  old/new {:.0}x",
        ot.as_secs_f64() / nt.as_secs_f64()
    );
    println!(
        "reclaim of {BATCH}: old {or:?}  new {nr:?}  old/new {:.0}x",
        or.as_secs_f64() / nr.as_secs_f64()
    );
}
