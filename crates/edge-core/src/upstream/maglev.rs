//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of a prime
//! number of slots, filled from each server's own permutation of the slots, so that
//! every server owns almost exactly 1/N of the slots (the spread) and a change of
//! membership moves little more than the keys of the server that came or went.
//!
//! How it fits: an `[[upstream]]` with `balance = "consistent_hash"` maps each request's
//! key hash (the cache key by default, `hash_key` otherwise) to a server through the
//! table of the servers that are up; the group rebuilds the table when that set changes
//! (a health check, a passive failure) and keeps it until the next change. Tables are
//! built from server names (addresses), so every node of a tier computes the same one.

/// Slots in a table: a prime well above the number of servers (the spread error is
/// about servers / slots).
pub const SLOTS: usize = 65_537;

/// A table: the server index of each slot (up to 64 servers: a `u64` mask names a set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    slots: Vec<u8>,
    /// Which servers it was built from.
    pub members: u64,
}

impl Table {
    /// Builds the table for the servers named `names` that are in `members` (bit i:
    /// server i). None when `members` is empty.
    pub fn build(names: &[String], members: u64) -> Option<Table> {
        let live: Vec<usize> = (0..names.len().min(64))
            .filter(|&i| members & (1 << i) != 0)
            .collect();
        if live.is_empty() {
            return None;
        }
        let m = SLOTS as u64;
        // Each server's permutation: offset + j * skip (mod M), skip in 1..M.
        let perm: Vec<(u64, u64)> = live
            .iter()
            .map(|&i| {
                let h = twox_hash::XxHash3_128::oneshot(names[i].as_bytes());
                let offset = (h as u64) % m;
                let skip = ((h >> 64) as u64) % (m - 1) + 1;
                (offset, skip)
            })
            .collect();
        const EMPTY: u8 = u8::MAX;
        let mut slots = vec![EMPTY; SLOTS];
        let mut next = vec![0u64; live.len()];
        let mut filled = 0;
        'fill: loop {
            for (k, &i) in live.iter().enumerate() {
                let (offset, skip) = perm[k];
                let mut c = ((offset + next[k] * skip) % m) as usize;
                while slots[c] != EMPTY {
                    next[k] += 1;
                    c = ((offset + next[k] * skip) % m) as usize;
                }
                slots[c] = i as u8;
                next[k] += 1;
                filled += 1;
                if filled == SLOTS {
                    break 'fill;
                }
            }
        }
        Some(Table { slots, members })
    }

    /// The server for a key hash.
    pub fn lookup(&self, key_hash: u64) -> usize {
        self.slots[(key_hash % SLOTS as u64) as usize] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    fn keys() -> impl Iterator<Item = u64> {
        (0..20_000u64)
            .map(|i| twox_hash::XxHash3_64::oneshot(format!("http://h/obj/{i}").as_bytes()))
    }

    #[test]
    fn every_server_owns_about_one_nth_of_the_keys() {
        for n in [2usize, 3, 4, 7, 16] {
            let t = Table::build(&names(n), (1u64 << n) - 1).unwrap();
            let mut counts = vec![0usize; n];
            for k in keys() {
                counts[t.lookup(k)] += 1;
            }
            let want = 20_000 / n;
            for (i, &c) in counts.iter().enumerate() {
                let dev = (c as f64 - want as f64).abs() / want as f64;
                assert!(dev < 0.08, "n={n} server {i}: {c} keys vs {want}");
            }
        }
    }

    #[test]
    fn removing_or_adding_a_server_moves_about_one_nth() {
        let n = 4;
        let all = Table::build(&names(n), 0b1111).unwrap();
        let without_2 = Table::build(&names(n), 0b1011).unwrap();
        let mut moved = 0;
        for k in keys() {
            let (a, b) = (all.lookup(k), without_2.lookup(k));
            if a != b {
                moved += 1;
            }
            assert_ne!(b, 2);
        }
        // Maglev moves the removed server's quarter and a little more (the price of its
        // even spread); the group looks healthy servers up in the table of every
        // configured server, so their keys never move for a health change.
        let frac = moved as f64 / 20_000.0;
        assert!((0.24..0.33).contains(&frac), "moved {frac}");
        // Adding a fifth server: about 1/5 move, all of them to it.
        let five = Table::build(&names(5), 0b11111).unwrap();
        let mut moved = 0;
        for k in keys() {
            let (a, b) = (all.lookup(k), five.lookup(k));
            if a != b {
                moved += 1;
            }
        }
        let frac = moved as f64 / 20_000.0;
        assert!((0.15..0.27).contains(&frac), "moved {frac}");
    }

    #[test]
    fn tables_depend_only_on_names_and_members() {
        let a = Table::build(&names(3), 0b111).unwrap();
        let b = Table::build(&names(3), 0b111).unwrap();
        assert_eq!(a, b);
        assert!(Table::build(&names(3), 0).is_none());
        let one = Table::build(&names(3), 0b010).unwrap();
        assert!(keys().all(|k| one.lookup(k) == 1));
    }
}
