//! `allow`, `deny` and `access_rules` (nginx's access module): at the top level, in a
//! `[[server]]` and in a location. Here: their types, nginx's inheritance (a block with
//! none of the keys takes its parent's), the `-t` checks, and the compiled list the
//! state layer keeps per route ([`compile`]).
//!
//! Order. nginx applies a block's `allow` and `deny` lines in the order written; TOML
//! tables do not keep the order between two keys, so `allow = [...]` with `deny = [...]`
//! means every `allow` first, then every `deny` (the common "allow these, deny all").
//! `access_rules = [{ allow = "..." }, { deny = "..." }]` is the ordered form, for lists
//! that interleave; a block may not have both forms.

use super::verr::VErr;
use super::{Config, Location, ServerCfg};
use crate::access::rules::{AccessList, Action, Rule, MAX_RULES};
use crate::vars::{Known, Piece, Template, Var};
use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

/// One `access_rules` item: `{ allow = "10.0.0.0/8" }` or `{ deny = "all" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRuleCfg {
    #[serde(default)]
    pub allow: Option<String>,
    #[serde(default)]
    pub deny: Option<String>,
}

/// A list of networks (`allow`, `deny`).
pub type NetList = Option<Spanned<Vec<String>>>;
/// `access_rules`.
pub type RuleList = Option<Spanned<Vec<AccessRuleCfg>>>;

/// A block that may hold access rules: the top level, a server, a location.
pub trait AccessKeys {
    /// `allow`, `deny`, `access_rules`.
    fn access(&self) -> (&NetList, &NetList, &RuleList);
    fn access_mut(&mut self) -> (&mut NetList, &mut NetList, &mut RuleList);
    /// Whether the block sets its own rules (any of the keys, even an empty list).
    fn has_access(&self) -> bool {
        let (a, d, r) = self.access();
        a.is_some() || d.is_some() || r.is_some()
    }
    /// Takes `parent`'s rules when it has none of its own.
    fn inherit_access(&mut self, parent: (&NetList, &NetList, &RuleList)) {
        if self.has_access() {
            return;
        }
        let (a, d, r) = self.access_mut();
        *a = parent.0.clone();
        *d = parent.1.clone();
        *r = parent.2.clone();
    }
}

macro_rules! access_keys {
    ($t:ty) => {
        impl AccessKeys for $t {
            fn access(&self) -> (&NetList, &NetList, &RuleList) {
                (&self.allow, &self.deny, &self.access_rules)
            }
            fn access_mut(&mut self) -> (&mut NetList, &mut NetList, &mut RuleList) {
                (&mut self.allow, &mut self.deny, &mut self.access_rules)
            }
        }
    };
}

access_keys!(Config);
access_keys!(ServerCfg);
access_keys!(Location);

/// nginx's inheritance: top level -> servers and top-level locations, server -> its
/// locations, each only where the block sets no rules of its own.
pub(super) fn inherit(cfg: &mut Config) {
    let top = (
        cfg.allow.clone(),
        cfg.deny.clone(),
        cfg.access_rules.clone(),
    );
    let top = (&top.0, &top.1, &top.2);
    for l in &mut cfg.location {
        l.inherit_access(top);
    }
    for s in &mut cfg.server {
        s.inherit_access(top);
        let own = (s.allow.clone(), s.deny.clone(), s.access_rules.clone());
        for l in &mut s.location {
            l.inherit_access((&own.0, &own.1, &own.2));
        }
    }
}

/// Why a block's rules do not compile: which of its keys, where, what.
#[derive(Debug)]
pub struct AccessError {
    /// `allow`, `deny` or `access_rules`.
    pub key: &'static str,
    pub span: Range<usize>,
    pub message: String,
}

/// A `"$name"` rule's variable: exactly one variable, nothing else.
fn rule_var(text: &str, known: &Known) -> Result<Var, String> {
    let t = Template::compile(text, known).map_err(|e| format!("{text:?}: {e}"))?;
    let mut pieces = t.pieces();
    match (pieces.next(), pieces.next()) {
        (Some(Piece::Var(v)), None) => Ok(v.clone()),
        _ => Err(format!(
            "{text:?} is not one variable (a rule is \"all\", an address or prefix, or \"$name\")"
        )),
    }
}

/// The block's rules, compiled (None when it sets none): `allow` then `deny`, or
/// `access_rules` in order.
pub fn compile(
    block: &impl AccessKeys,
    known: &Known,
) -> Result<Option<AccessList<Var>>, AccessError> {
    let (allow, deny, ordered) = block.access();
    if !block.has_access() {
        return Ok(None);
    }
    let mut rules = Vec::new();
    if let Some(r) = ordered {
        if let Some(other) = allow.as_ref().or(deny.as_ref()) {
            return Err(AccessError {
                key: "access_rules",
                span: pick(r.span(), other.span()),
                message: "set access_rules, or allow and deny, not both (access_rules is the ordered form of the two)".into(),
            });
        }
        let at = |message: String| AccessError {
            key: "access_rules",
            span: r.span(),
            message,
        };
        check_len(r.get_ref().len()).map_err(at)?;
        for item in r.get_ref() {
            let (action, text) = match (&item.allow, &item.deny) {
                (Some(a), None) => (Action::Allow, a),
                (None, Some(d)) => (Action::Deny, d),
                _ => {
                    return Err(at(
                        "each rule is { allow = \"...\" } or { deny = \"...\" }".into()
                    ))
                }
            };
            rules.push(Rule::parse(action, text, |v| rule_var(v, known)).map_err(at)?);
        }
    } else {
        let count = allow.as_ref().map_or(0, |l| l.get_ref().len())
            + deny.as_ref().map_or(0, |l| l.get_ref().len());
        for (key, list, action) in [
            ("allow", allow, Action::Allow),
            ("deny", deny, Action::Deny),
        ] {
            let Some(list) = list else { continue };
            let at = |message: String| AccessError {
                key,
                span: list.span(),
                message,
            };
            check_len(count).map_err(at)?;
            for text in list.get_ref() {
                rules.push(Rule::parse(action, text, |v| rule_var(v, known)).map_err(at)?);
            }
        }
    }
    Ok(Some(AccessList::new(rules)))
}

/// The span an error points at: `a`, unless it is unknown (a default).
fn pick(a: Range<usize>, b: Range<usize>) -> Range<usize> {
    if a.end > 0 {
        a
    } else {
        b
    }
}

fn check_len(n: usize) -> Result<(), String> {
    if n > MAX_RULES {
        return Err(format!(
            "at most {MAX_RULES} rules in one block; put long lists in a [[geo]] file and deny = [\"$variable\"]"
        ));
    }
    Ok(())
}

/// The `-t` checks: every block's rules compile. Blocks as written come first (the top
/// level, then servers, then locations), so an error in inherited rules names the key
/// where they are written.
pub(super) fn validate(cfg: &Config, known: &Known) -> Result<(), VErr> {
    let check = |block: &dyn Fn() -> Result<Option<AccessList<Var>>, AccessError>, table: &str| {
        block().map(drop).map_err(|e| VErr {
            span: Some(e.span).filter(|s| s.end > 0),
            key: if table.is_empty() {
                e.key.to_string()
            } else {
                format!("{table}.{}", e.key)
            },
            message: e.message,
        })
    };
    check(&|| compile(cfg, known), "")?;
    for s in &cfg.server {
        check(&|| compile(s, known), "server")?;
    }
    for l in cfg
        .location
        .iter()
        .chain(cfg.server.iter().flat_map(|s| &s.location))
    {
        check(&|| compile(l, known), "location")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{err, MIN};
    use super::*;

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().unwrap()
    }

    /// The action of a compiled block for `addr` (variables never match).
    fn action(block: &impl AccessKeys, cfg: &Config, addr: &str) -> Option<Action> {
        let known = super::super::sites::known(cfg);
        compile(block, &known)
            .unwrap()
            .map(|l| l.check(ip(addr), |_| false))
    }

    #[test]
    fn allow_then_deny_and_the_ordered_form() {
        let cfg = parse(
            "t.toml",
            &format!(
                "{MIN}[[location]]\nprefix = \"/a\"\nreturn = {{ status = 200 }}\n\
                 deny = [\"all\"]\nallow = [\"10.0.0.0/8\", \"2001:db8::/32\"]\n\
                 [[location]]\nprefix = \"/b\"\nreturn = {{ status = 200 }}\n\
                 access_rules = [{{ deny = \"10.1.0.0/16\" }}, {{ allow = \"10.0.0.0/8\" }}, {{ deny = \"all\" }}]\n"
            ),
        )
        .unwrap();
        let (a, b) = (&cfg.location[0], &cfg.location[1]);
        // allow first, then deny, whatever the order in the file.
        assert_eq!(action(a, &cfg, "10.1.2.3"), Some(Action::Allow));
        assert_eq!(action(a, &cfg, "2001:db8::1"), Some(Action::Allow));
        assert_eq!(action(a, &cfg, "::ffff:10.9.9.9"), Some(Action::Allow));
        assert_eq!(action(a, &cfg, "11.0.0.1"), Some(Action::Deny));
        assert_eq!(action(b, &cfg, "10.1.2.3"), Some(Action::Deny));
        assert_eq!(action(b, &cfg, "10.2.2.3"), Some(Action::Allow));
        assert_eq!(action(b, &cfg, "::1"), Some(Action::Deny));
    }

    #[test]
    fn inheritance_top_server_location() {
        let cfg = parse(
            "t.toml",
            &format!(
                "deny = [\"192.0.2.0/24\"]\n{MIN}\
                 [[location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\n\
                 [[location]]\nprefix = \"/own\"\nreturn = {{ status = 200 }}\nallow = [\"192.0.2.1\"]\ndeny = [\"all\"]\n\
                 [[server]]\nnames = [\"a\"]\n\
                 [[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\n\
                 [[server]]\nnames = [\"b\"]\nallow = [\"all\"]\n\
                 [[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\n\
                 [[server.location]]\nprefix = \"/open\"\nreturn = {{ status = 200 }}\naccess_rules = []\n"
            ),
        )
        .unwrap();
        let x = "192.0.2.7";
        // Top-level location without rules: the top level's.
        assert_eq!(action(&cfg.location[0], &cfg, x), Some(Action::Deny));
        // Its own rules replace them (nginx: no merging).
        assert_eq!(action(&cfg.location[1], &cfg, x), Some(Action::Deny));
        assert_eq!(
            action(&cfg.location[1], &cfg, "192.0.2.1"),
            Some(Action::Allow)
        );
        // A server without rules takes the top level's, and its locations too.
        assert_eq!(
            action(&cfg.server[0].location[0], &cfg, x),
            Some(Action::Deny)
        );
        // A server's own rules go to its locations.
        assert_eq!(
            action(&cfg.server[1].location[0], &cfg, x),
            Some(Action::Allow)
        );
        // An empty list is a location's own (empty) rules: nothing is denied.
        assert_eq!(
            action(&cfg.server[1].location[1], &cfg, x),
            Some(Action::Allow)
        );
        assert!(cfg.server[1].location[1].has_access());
    }

    #[test]
    fn variables_in_rules() {
        let cfg = parse(
            "t.toml",
            &format!(
                "{MIN}[[map]]\nsource = \"$http_x\"\nvariable = \"$bad\"\nentries = [{{ match = \"1\", value = \"1\" }}]\n\
                 [[location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\ndeny = [\"$bad\", \"$http_x_blocked\"]\n"
            ),
        )
        .unwrap();
        let known = super::super::sites::known(&cfg);
        let l = compile(&cfg.location[0], &known).unwrap().unwrap();
        let mut seen = Vec::new();
        l.check(ip("1.2.3.4"), |v| {
            seen.push(v.clone());
            false
        });
        assert_eq!(seen.len(), 2);
        assert!(matches!(seen[0], Var::Map(0)));
    }

    #[test]
    fn config_errors_name_the_key_and_line() {
        let loc = "[[location]]\nprefix = \"/\"\nreturn = { status = 200 }\n";
        for (extra, key, line, says) in [
            (
                "allow = [\"10.0.0.0/8\", \"10.0.0.300\"]\n",
                "location.allow",
                6,
                "invalid address \"10.0.0.300\"",
            ),
            (
                "deny = [\"::/129\"]\n",
                "location.deny",
                6,
                "invalid prefix length",
            ),
            (
                "allow = [\"10.0.0.0/8\"]\naccess_rules = [{ deny = \"all\" }]\n",
                "location.access_rules",
                7,
                "not both",
            ),
            (
                "access_rules = [{ deny = \"all\", allow = \"10.0.0.0/8\" }]\n",
                "location.access_rules",
                6,
                "each rule is",
            ),
            (
                "access_rules = [{}]\n",
                "location.access_rules",
                6,
                "each rule is",
            ),
            (
                "deny = [\"$nope\"]\n",
                "location.deny",
                6,
                "unknown variable \"$nope\"",
            ),
            (
                "deny = [\"$a$b\"]\n",
                "location.deny",
                6,
                "unknown variable",
            ),
            (
                "deny = [\"$uri x\"]\n",
                "location.deny",
                6,
                "not one variable",
            ),
            ("deny = [\"ALL\"]\n", "location.deny", 6, "invalid address"),
        ] {
            let e = err(&format!("{MIN}{loc}{extra}"));
            assert_eq!(
                (e.key.as_str(), e.line, e.message.contains(says)),
                (key, line, true),
                "{extra}: {e}"
            );
        }
        // Top-level and server rules are checked where they are written.
        let e = err(&format!("deny = [\"x\"]\n{MIN}{loc}"));
        assert_eq!((e.key.as_str(), e.line), ("deny", 1));
        let e = err(&format!(
            "{MIN}[[server]]\nnames = [\"a\"]\nallow = [\"1.2.3.4/40\"]\n[[server.location]]\nprefix = \"/\"\nreturn = {{ status = 200 }}\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("server.allow", 5));
        // Too many rules.
        let many: Vec<String> = (0..=MAX_RULES)
            .map(|i| format!("\"10.{}.{}.0/24\"", i / 256, i % 256))
            .collect();
        let e = err(&format!("{MIN}{loc}deny = [{}]\n", many.join(",")));
        assert!(e.message.contains("[[geo]]"), "{e}");
    }
}
