//! The generic cell rate algorithm (GCRA), nginx's leaky bucket with a burst in one
//! number: a key's whole state is its *theoretical arrival time* (TAT), the time at
//! which its bucket would be empty again. A request at `now` sees `excess = TAT - now`
//! of work queued ahead of it (nothing when the TAT is past); it is refused when that is
//! more than `burst` requests' worth, else it adds one interval to the TAT.
//!
//! The mapping to nginx (`ngx_http_limit_req_module.c`): nginx's `excess` in
//! milli-requests, drained at the rate since `last` and plus 1000 per request, is this
//! `excess / interval`; its `burst` is `tolerance / interval`; its delay for a request,
//! `(excess - delay) / rate`, is `excess - free` here. So the first `burst + 1`
//! requests at once pass (the first with no excess), and a request past them is refused
//! without changing the state, as in nginx. Nanoseconds instead of milliseconds: no
//! rounding of the rate to whole milli-requests per millisecond.

/// What a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it now.
    Pass,
    /// Serve it after this many nanoseconds (it conforms then).
    Delay(u64),
    /// Over `burst`: refuse it. A request of this key would pass this many nanoseconds
    /// from now (for a `hold` on the answer).
    Reject(u64),
}

/// One `limit_req` of a zone, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// The time one request takes at the zone's rate.
    pub interval: u64,
    /// `burst` intervals: how far ahead of now the TAT may be for a request to pass.
    pub tolerance: u64,
    /// Of the excess, how much is served without delay: `delay` intervals, the whole
    /// burst with `nodelay` (`u64::MAX`), nothing by default.
    pub free: u64,
}

impl Gcra {
    /// `burst` and `delay` in requests; `nodelay` serves the whole burst at once.
    pub fn new(interval: u64, burst: u64, nodelay: bool, delay: u64) -> Gcra {
        let interval = interval.max(1);
        Gcra {
            interval,
            tolerance: burst.saturating_mul(interval),
            free: if nodelay {
                u64::MAX
            } else {
                delay.saturating_mul(interval)
            },
        }
    }

    /// The verdict for a request at `now` against the stored `tat`, and the TAT to
    /// store when it is taken (the old one when it is refused).
    #[inline]
    pub fn decide(&self, tat: u64, now: u64) -> (Verdict, u64) {
        let base = tat.max(now);
        let excess = base - now;
        if excess > self.tolerance {
            return (Verdict::Reject(excess - self.tolerance), tat);
        }
        let wait = excess.saturating_sub(self.free);
        let verdict = if wait == 0 {
            Verdict::Pass
        } else {
            Verdict::Delay(wait)
        };
        (verdict, base.saturating_add(self.interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// `n` requests at the same instant from a fresh key: the verdicts.
    fn at_once(g: &Gcra, n: usize, now: u64) -> (Vec<Verdict>, u64) {
        let mut tat = 0;
        let mut out = Vec::new();
        for _ in 0..n {
            let (v, t) = g.decide(tat, now);
            tat = t;
            out.push(v);
        }
        (out, tat)
    }

    #[test]
    fn without_burst_one_request_per_interval() {
        let g = Gcra::new(100 * MS, 0, false, 0);
        let (v, tat) = at_once(&g, 3, 1_000 * MS);
        assert_eq!(
            v,
            [
                Verdict::Pass,
                Verdict::Reject(100 * MS),
                Verdict::Reject(100 * MS)
            ]
        );
        assert_eq!(tat, 1_100 * MS);
        // Just before the interval is over: still refused (and told that the next
        // passes in 1 ms); at it: taken.
        assert_eq!(g.decide(tat, 1_099 * MS).0, Verdict::Reject(MS));
        assert_eq!(g.decide(tat, 1_100 * MS), (Verdict::Pass, 1_200 * MS));
        // A key idle for long starts afresh: no credit is saved up beyond the burst.
        assert_eq!(g.decide(tat, 9_000 * MS), (Verdict::Pass, 9_100 * MS));
    }

    #[test]
    fn burst_without_nodelay_delays_each_to_its_slot() {
        let g = Gcra::new(100 * MS, 5, false, 0);
        let (v, _) = at_once(&g, 8, 0);
        let mut want = vec![Verdict::Pass];
        want.extend((1..=5).map(|i| Verdict::Delay(i * 100 * MS)));
        want.extend([Verdict::Reject(100 * MS), Verdict::Reject(100 * MS)]);
        assert_eq!(v, want);
    }

    #[test]
    fn burst_with_nodelay_serves_burst_plus_one_at_once() {
        let g = Gcra::new(10 * MS, 20, true, 0);
        let (v, tat) = at_once(&g, 30, 5 * MS);
        assert_eq!(v.iter().filter(|v| **v == Verdict::Pass).count(), 21);
        assert!(v[21..].iter().all(|v| *v == Verdict::Reject(10 * MS)));
        // The bucket drains at the rate: one interval later, one more request.
        assert_eq!(g.decide(tat, 15 * MS).0, Verdict::Pass);
        let (_, tat2) = g.decide(tat, 15 * MS);
        assert_eq!(g.decide(tat2, 15 * MS).0, Verdict::Reject(10 * MS));
    }

    #[test]
    fn delay_serves_the_first_at_once_and_delays_the_rest() {
        // nginx's example: burst=12 delay=8: 9 at once (the one in the rate and 8 of the
        // excess), the next 4 delayed, then refused.
        let g = Gcra::new(1_000 * MS, 12, false, 8);
        let (v, _) = at_once(&g, 15, 0);
        assert!(v[..9].iter().all(|v| *v == Verdict::Pass), "{v:?}");
        assert_eq!(
            &v[9..13],
            &(1..=4)
                .map(|i| Verdict::Delay(i * 1_000 * MS))
                .collect::<Vec<_>>()[..]
        );
        let r = Verdict::Reject(1_000 * MS);
        assert_eq!(&v[13..], &[r, r]);
        // A delay above the burst is nodelay.
        let g = Gcra::new(1_000 * MS, 3, false, 10);
        let (v, _) = at_once(&g, 5, 0);
        assert_eq!(v.iter().filter(|v| **v == Verdict::Pass).count(), 4);
        assert_eq!(v[4], Verdict::Reject(1_000 * MS));
    }

    #[test]
    fn counts_over_a_window_follow_the_rate() {
        // 10 r/s, burst 2, nodelay: a client sending every millisecond for 10 s gets
        // 100 + 2 + 1 through, never more.
        let g = Gcra::new(100 * MS, 2, true, 0);
        let mut tat = 0;
        let mut passed = 0;
        for t in 0..10_000u64 {
            let (v, next) = g.decide(tat, t * MS);
            if v == Verdict::Pass {
                passed += 1;
                tat = next;
            }
        }
        assert_eq!(passed, 100 + 2);
        // Requests exactly at the rate all pass.
        let mut tat = 0;
        for t in 0..100u64 {
            let (v, next) = g.decide(tat, t * 100 * MS);
            assert_eq!(v, Verdict::Pass);
            tat = next;
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        let g = Gcra::new(u64::MAX, u64::MAX, false, u64::MAX);
        let (v, t) = g.decide(u64::MAX, u64::MAX);
        assert_eq!(v, Verdict::Pass);
        assert_eq!(t, u64::MAX);
        let g = Gcra::new(0, 0, false, 0);
        assert_eq!(g.interval, 1);
        assert_eq!(g.decide(0, 0), (Verdict::Pass, 1));
    }
}
