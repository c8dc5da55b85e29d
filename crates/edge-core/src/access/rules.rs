//! Access lists, nginx's `allow`/`deny`: rules in order, the first that matches the
//! client decides; when none matches the client is allowed.
//!
//! A rule matches `all`, a network ([`Cidr`]), or a variable `V` that the caller tests
//! (`"$blocked"`: the list is generic over what a variable is, so this module needs no
//! template machinery). Compiled once: consecutive network rules with the same action
//! become one set (first-match over them is "any of them"), a list held as masks while
//! small and as a [`RangeTable`] when long, so a check is a few integer comparisons
//! and never allocates.

use super::cidr::{canonical, Cidr};
use super::ranges::RangeTable;
use std::net::IpAddr;

/// Most rules in one list (`allow`, `deny` and `access_rules` of one block together).
/// Longer lists belong in a `[[geo]]` file, tested by a `"$variable"` rule.
pub const MAX_RULES: usize = 4096;

/// Networks of one family tested one by one before a range table pays off.
const FEW: usize = 16;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher<V> {
    /// `"all"`.
    All,
    Net(Cidr),
    /// `"$name"`: matches when the caller's test of the variable says so.
    Var(V),
}

/// One `allow` or `deny`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule<V> {
    pub action: Action,
    pub matcher: Matcher<V>,
}

impl<V> Rule<V> {
    /// Parses `"all"`, a network, or a `"$name"` (resolved by `var`).
    pub fn parse(
        action: Action,
        text: &str,
        var: impl FnOnce(&str) -> Result<V, String>,
    ) -> Result<Rule<V>, String> {
        let t = text.trim();
        let matcher = if t == "all" {
            Matcher::All
        } else if t.starts_with('$') {
            Matcher::Var(var(t)?)
        } else {
            Matcher::Net(Cidr::parse(t).map_err(String::from)?)
        };
        Ok(Rule { action, matcher })
    }
}

/// Networks of both families; see the module doc.
#[derive(Debug, Clone)]
enum NetSet {
    /// (network, mask) pairs.
    Few {
        v4: Box<[(u32, u32)]>,
        v6: Box<[(u128, u128)]>,
    },
    Many {
        v4: RangeTable<u32>,
        v6: RangeTable<u128>,
    },
}

impl NetSet {
    fn new(nets: &[Cidr]) -> NetSet {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for n in nets {
            match n.addr {
                IpAddr::V4(a) => v4.push((u32::from(a), n.prefix)),
                IpAddr::V6(a) => v6.push((u128::from(a), n.prefix)),
            }
        }
        if v4.len() <= FEW && v6.len() <= FEW {
            NetSet::Few {
                v4: v4
                    .iter()
                    .map(|&(a, p)| (a, super::cidr::mask4(p)))
                    .collect(),
                v6: v6
                    .iter()
                    .map(|&(a, p)| (a, super::cidr::mask6(p)))
                    .collect(),
            }
        } else {
            NetSet::Many {
                v4: RangeTable::build(v4.into_iter().map(|(a, p)| (a, p, 0)).collect()),
                v6: RangeTable::build(v6.into_iter().map(|(a, p)| (a, p, 0)).collect()),
            }
        }
    }

    /// `ip` is canonical (IPv4-mapped addresses are IPv4).
    #[inline]
    fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (NetSet::Few { v4, .. }, IpAddr::V4(a)) => {
                let a = u32::from(a);
                v4.iter().any(|&(n, m)| a & m == n)
            }
            (NetSet::Few { v6, .. }, IpAddr::V6(a)) => {
                let a = u128::from(a);
                v6.iter().any(|&(n, m)| a & m == n)
            }
            (NetSet::Many { v4, .. }, IpAddr::V4(a)) => v4.get(u32::from(a)).is_some(),
            (NetSet::Many { v6, .. }, IpAddr::V6(a)) => v6.get(u128::from(a)).is_some(),
        }
    }
}

#[derive(Debug, Clone)]
enum Segment<V> {
    /// A run of consecutive network rules with one action.
    Nets(Action, NetSet),
    All(Action),
    Var(Action, V),
}

/// A compiled list of rules.
#[derive(Debug, Clone)]
pub struct AccessList<V> {
    segments: Box<[Segment<V>]>,
    /// Rules as given (for logs and `/status`).
    rules: usize,
}

impl<V> AccessList<V> {
    /// Compiles rules, in order. Rules after an `all` can never match and are dropped.
    pub fn new(rules: Vec<Rule<V>>) -> AccessList<V> {
        let count = rules.len();
        let mut segments = Vec::new();
        let mut run: Vec<Cidr> = Vec::new();
        let mut run_action = Action::Allow;
        let flush = |segments: &mut Vec<Segment<V>>, run: &mut Vec<Cidr>, action: Action| {
            if !run.is_empty() {
                segments.push(Segment::Nets(action, NetSet::new(run)));
                run.clear();
            }
        };
        for r in rules {
            match r.matcher {
                Matcher::Net(c) => {
                    if r.action != run_action {
                        flush(&mut segments, &mut run, run_action);
                        run_action = r.action;
                    }
                    run.push(c);
                }
                Matcher::All => {
                    flush(&mut segments, &mut run, run_action);
                    segments.push(Segment::All(r.action));
                    break;
                }
                Matcher::Var(v) => {
                    flush(&mut segments, &mut run, run_action);
                    segments.push(Segment::Var(r.action, v));
                }
            }
        }
        flush(&mut segments, &mut run, run_action);
        AccessList {
            segments: segments.into_boxed_slice(),
            rules: count,
        }
    }

    /// The action for `ip` (an IPv4-mapped address is tested as IPv4): that of the
    /// first rule that matches, [`Action::Allow`] when none does. `var_matches` tests a
    /// variable rule; it is called only when the rules before it did not match.
    #[inline]
    pub fn check(&self, ip: IpAddr, mut var_matches: impl FnMut(&V) -> bool) -> Action {
        let ip = canonical(ip);
        for s in self.segments.iter() {
            match s {
                Segment::Nets(action, nets) => {
                    if nets.contains(ip) {
                        return *action;
                    }
                }
                Segment::All(action) => return *action,
                Segment::Var(action, v) => {
                    if var_matches(v) {
                        return *action;
                    }
                }
            }
        }
        Action::Allow
    }

    /// Rules the list was compiled from.
    pub fn rules(&self) -> usize {
        self.rules
    }
}

/// Whether a variable's value makes a `"$var"` rule match: not empty and not `"0"`
/// (nginx's `if ($var)` truth).
pub fn truthy(value: &[u8]) -> bool {
    !value.is_empty() && value != b"0"
}

#[cfg(test)]
mod tests {
    use super::*;
    use edge_rand::SplitMix64;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn list(rules: &[(Action, &str)]) -> AccessList<String> {
        AccessList::new(
            rules
                .iter()
                .map(|(a, t)| Rule::parse(*a, t, |v| Ok(v.to_string())).unwrap())
                .collect(),
        )
    }

    use Action::{Allow, Deny};

    #[test]
    fn first_match_wins_v4() {
        // nginx's example: deny one host, allow its network, allow another, deny all.
        let l = list(&[
            (Deny, "192.168.1.1"),
            (Allow, "192.168.1.0/24"),
            (Allow, "10.1.1.0/16"),
            (Allow, "2001:0db8::/32"),
            (Deny, "all"),
        ]);
        let none = |_: &String| false;
        assert_eq!(l.check(ip("192.168.1.1"), none), Deny);
        assert_eq!(l.check(ip("192.168.1.2"), none), Allow);
        assert_eq!(l.check(ip("10.1.200.3"), none), Allow);
        assert_eq!(l.check(ip("10.2.0.1"), none), Deny);
        assert_eq!(l.check(ip("::ffff:192.168.1.1"), none), Deny);
        assert_eq!(l.check(ip("::ffff:192.168.1.9"), none), Allow);
        assert_eq!(l.check(ip("8.8.8.8"), none), Deny);
        // No rule at all, or none matching: allowed.
        assert_eq!(list(&[]).check(ip("1.2.3.4"), none), Allow);
        assert_eq!(
            list(&[(Deny, "10.0.0.0/8")]).check(ip("1.2.3.4"), none),
            Allow
        );
    }

    #[test]
    fn first_match_wins_v6() {
        let l = list(&[
            (Deny, "2001:db8:1::/48"),
            (Allow, "2001:db8::/32"),
            (Allow, "::1"),
            (Deny, "10.0.0.0/8"),
            (Deny, "::/0"),
        ]);
        let none = |_: &String| false;
        assert_eq!(l.check(ip("2001:db8:1::5"), none), Deny);
        assert_eq!(l.check(ip("2001:db8:2::5"), none), Allow);
        assert_eq!(l.check(ip("::1"), none), Allow);
        assert_eq!(l.check(ip("::2"), none), Deny);
        assert_eq!(l.check(ip("10.1.1.1"), none), Deny);
        // `::/0` is IPv6 only: an IPv4 client outside 10/8 falls through to allow.
        assert_eq!(l.check(ip("11.1.1.1"), none), Allow);
    }

    #[test]
    fn variables_are_tested_in_order_and_only_when_reached() {
        let l = list(&[
            (Allow, "10.0.0.0/8"),
            (Deny, "$blocked"),
            (Allow, "$vip"),
            (Deny, "all"),
        ]);
        let mut asked = Vec::new();
        let a = l.check(ip("10.0.0.1"), |v| {
            asked.push(v.clone());
            true
        });
        assert_eq!((a, asked.len()), (Allow, 0));
        let a = l.check(ip("1.1.1.1"), |v| {
            asked.push(v.clone());
            v == "$vip"
        });
        assert_eq!(a, Allow);
        assert_eq!(asked, ["$blocked", "$vip"]);
        assert_eq!(l.check(ip("1.1.1.1"), |v| v == "$blocked"), Deny);
        assert_eq!(l.check(ip("1.1.1.1"), |_| false), Deny);
        assert!(truthy(b"RU") && truthy(b"1") && truthy(b"00"));
        assert!(!truthy(b"") && !truthy(b"0"));
    }

    #[test]
    fn rules_after_all_are_dropped() {
        let l = list(&[(Allow, "all"), (Deny, "10.0.0.0/8")]);
        assert_eq!(l.segments.len(), 1);
        assert_eq!(l.rules(), 2);
        assert_eq!(l.check(ip("10.0.0.1"), |_| true), Allow);
    }

    #[test]
    fn bad_rules_are_refused() {
        let var = |_: &str| -> Result<(), String> { Err("unknown variable".into()) };
        assert!(Rule::parse(Allow, "10.0.0.300", var)
            .unwrap_err()
            .contains("invalid address"));
        assert!(Rule::parse(Allow, "10.0.0.0/40", var)
            .unwrap_err()
            .contains("prefix length"));
        assert!(Rule::parse(Deny, "$x", var)
            .unwrap_err()
            .contains("unknown variable"));
        assert!(Rule::parse(Deny, "ALL", var).is_err());
        assert_eq!(
            Rule::parse(Deny, " all ", var).unwrap().matcher,
            Matcher::All
        );
    }

    /// Random lists against the rules read one by one: short runs (masks) and long
    /// runs (range tables), both families, mapped clients.
    #[test]
    fn compiled_lists_match_a_plain_scan() {
        let mut rng = SplitMix64::new(0xacc);
        let addr = |rng: &mut SplitMix64| -> IpAddr {
            let x = rng.next_u64();
            match rng.below(3) {
                0 => IpAddr::V4(((10u32 << 24) | (x as u32 & 0x0003_ff0f)).into()),
                1 => IpAddr::V6(((0x2001_0db8u128 << 96) | u128::from(x & 0x3_0000_ff0f)).into()),
                _ => IpAddr::V6(
                    std::net::Ipv4Addr::from((10u32 << 24) | (x as u32 & 0x0003_0f0f))
                        .to_ipv6_mapped(),
                ),
            }
        };
        for round in 0..60 {
            let n = [1usize, 4, 20, 60, 200][round % 5];
            let mut rules = Vec::new();
            for _ in 0..n {
                // Long runs of one action now and then, so that range tables appear.
                let action = if round % 3 == 0 || rng.below(4) > 0 {
                    Deny
                } else {
                    Allow
                };
                let a = addr(&mut rng);
                let len = rng.below(if canonical(a).is_ipv4() { 33 } else { 129 }) as u8;
                rules.push(Rule {
                    action,
                    matcher: Matcher::Net(Cidr::new(a, len)),
                });
            }
            if rng.below(2) == 0 {
                rules.push(Rule {
                    action: Deny,
                    matcher: Matcher::All,
                });
            }
            let l = AccessList::<()>::new(rules.clone());
            for _ in 0..500 {
                let a = addr(&mut rng);
                let want = rules
                    .iter()
                    .find(|r| match &r.matcher {
                        Matcher::All => true,
                        Matcher::Net(c) => c.contains(a),
                        Matcher::Var(_) => false,
                    })
                    .map_or(Allow, |r| r.action);
                assert_eq!(l.check(a, |_| false), want, "{a}");
            }
        }
    }
}
