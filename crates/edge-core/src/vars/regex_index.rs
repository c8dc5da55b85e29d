//! A literal-prefix index over a list of regexes: most location regexes are anchored
//! and start with a literal (`^/images/`), and such a regex can only match a subject
//! that starts with that literal. The index finds, walking a byte trie of the
//! prefixes along the subject, the few regexes that can match; only those run, in list
//! order.

use regex_syntax::hir::{Class, HirKind, Look};

/// At most this many candidates are run one by one; past it the caller's `RegexSet`
/// (or scan) takes over.
pub const MAX_CANDIDATES: usize = 8;

/// The literal a match must start with: `Some(prefix)` when the pattern, parsed as the
/// `regex` crate parses it (`ci`: case-insensitive), is `^` (start of the subject)
/// followed by a literal. None when there is no such prefix (or it is empty).
pub fn anchored_prefix(pattern: &str, ci: bool) -> Option<Box<[u8]>> {
    prefix_of(pattern, ci, false)
}

/// [`anchored_prefix`] for subjects that are ASCII-lower-cased before matching (server
/// names): a case-insensitive ASCII letter (`[Xx]`) can only be the lower-case letter
/// there, so it extends the prefix. (`k` and `s` are not such pairs: they also match
/// non-ASCII letters, and the prefix stops there.)
pub fn anchored_prefix_lowered(pattern: &str, ci: bool) -> Option<Box<[u8]>> {
    prefix_of(pattern, ci, true)
}

fn prefix_of(pattern: &str, ci: bool, lowered: bool) -> Option<Box<[u8]>> {
    let hir = regex_syntax::ParserBuilder::new()
        .case_insensitive(ci)
        .build()
        .parse(pattern)
        .ok()?;
    let HirKind::Concat(items) = hir.kind() else {
        return None;
    };
    let mut it = items.iter();
    if !matches!(it.next()?.kind(), HirKind::Look(Look::Start)) {
        return None;
    }
    let mut prefix = Vec::new();
    for h in it {
        match h.kind() {
            HirKind::Literal(l) => prefix.extend_from_slice(&l.0),
            HirKind::Class(c) if lowered => match ascii_letter_pair(c) {
                Some(b) => prefix.push(b),
                None => break,
            },
            _ => break,
        }
    }
    (!prefix.is_empty()).then(|| prefix.into_boxed_slice())
}

/// The lower-case letter of a class that is exactly one ASCII letter in both cases.
fn ascii_letter_pair(c: &Class) -> Option<u8> {
    let (a, b) = match c {
        Class::Unicode(u) => match u.ranges() {
            [x, y] if x.start() == x.end() && y.start() == y.end() => {
                (u8::try_from(x.start()).ok()?, u8::try_from(y.start()).ok()?)
            }
            _ => return None,
        },
        Class::Bytes(u) => match u.ranges() {
            [x, y] if x.start() == x.end() && y.start() == y.end() => (x.start(), y.start()),
            _ => return None,
        },
    };
    (a.is_ascii_uppercase() && b == a.to_ascii_lowercase()).then_some(b)
}

/// A node of the prefix trie: its children by next byte, and the regexes whose prefix
/// ends here (indices, in list order).
#[derive(Default, Clone, Debug)]
struct Node {
    children: Vec<(u8, u32)>,
    here: Vec<u16>,
}

/// The regexes (by index into the caller's list) in a byte trie of their anchored
/// literal prefixes; those without one are always candidates. A lookup walks the
/// subject's bytes as deep as the trie goes: a few steps, no hashing.
#[derive(Default, Clone, Debug)]
pub struct PrefixIndex {
    /// `nodes[0]` is the root (the empty prefix: unused).
    nodes: Vec<Node>,
    /// Regexes without a prefix, in list order.
    open: Vec<u16>,
}

impl PrefixIndex {
    /// The index of `prefixes` (one per regex, in list order). None when it would not
    /// narrow anything down (no regex has a prefix, or too many have none).
    pub fn build(prefixes: &[Option<Box<[u8]>>]) -> Option<PrefixIndex> {
        if prefixes.len() > u16::MAX as usize {
            return None;
        }
        let mut ix = PrefixIndex {
            nodes: vec![Node::default()],
            open: Vec::new(),
        };
        for (i, p) in prefixes.iter().enumerate() {
            let i = i as u16;
            let Some(p) = p else {
                ix.open.push(i);
                continue;
            };
            let mut node = 0;
            for &c in p.iter() {
                let found = ix.nodes[node].children.iter().find(|(b, _)| *b == c);
                node = match found {
                    Some(&(_, next)) => next as usize,
                    None => {
                        let next = ix.nodes.len();
                        ix.nodes.push(Node::default());
                        ix.nodes[node].children.push((c, next as u32));
                        next
                    }
                };
            }
            ix.nodes[node].here.push(i);
        }
        if ix.open.len() >= MAX_CANDIDATES || ix.open.len() == prefixes.len() {
            return None;
        }
        Some(ix)
    }

    /// The candidates for `subject` in list order, into `out`; None when there are
    /// more than [`MAX_CANDIDATES`] (then every regex must be considered).
    pub fn candidates<'o>(
        &self,
        subject: &[u8],
        out: &'o mut [u16; MAX_CANDIDATES],
    ) -> Option<&'o [u16]> {
        let mut n = 0;
        let mut push = |list: &[u16], n: &mut usize| -> Option<()> {
            let end = *n + list.len();
            // A loop, not `copy_from_slice`: lists are a few entries (no memcpy call).
            for (o, &i) in out.get_mut(*n..end)?.iter_mut().zip(list) {
                *o = i;
            }
            *n = end;
            Some(())
        };
        push(&self.open, &mut n)?;
        let mut sources = usize::from(!self.open.is_empty());
        let mut node = &self.nodes[0];
        for &c in subject {
            let Some(&(_, next)) = node.children.iter().find(|(b, _)| *b == c) else {
                break;
            };
            node = &self.nodes[next as usize];
            if !node.here.is_empty() {
                push(&node.here, &mut n)?;
                sources += 1;
            }
        }
        let found = &mut out[..n];
        if sources > 1 {
            found.sort_unstable();
        }
        Some(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<Vec<u8>> {
        anchored_prefix(s, false).map(|b| b.to_vec())
    }

    #[test]
    fn prefixes_only_of_anchored_literals() {
        assert_eq!(p("^/obj/(?<size>[0-9]+k)/"), Some(b"/obj/".to_vec()));
        assert_eq!(p("^/r12/([0-9]+)$"), Some(b"/r12/".to_vec()));
        assert_eq!(p(r"^/a\.b"), Some(b"/a.b".to_vec()));
        assert_eq!(p("^/ab?"), Some(b"/a".to_vec()));
        assert_eq!(p("^/ab*c"), Some(b"/a".to_vec()));
        assert_eq!(p("/obj/"), None);
        assert_eq!(p("^/a|^/b"), None);
        assert_eq!(p("^(/a|/b)"), None);
        assert_eq!(p("(?m)^/a"), None);
        assert_eq!(p(r"\.jpg$"), None);
        assert_eq!(p("^/(a)"), Some(b"/".to_vec()));
        assert_eq!(anchored_prefix("^/abc", true).as_deref(), Some(&b"/"[..]));
        assert_eq!(p("^"), None);
    }

    #[test]
    fn lowered_subjects_take_case_insensitive_letters() {
        let l = |s: &str| anchored_prefix_lowered(s, true).map(|b| b.to_vec());
        assert_eq!(l(r"^r99-(\d+)\.regex\.example$"), Some(b"r99-".to_vec()));
        assert_eq!(l("^WWW.x"), Some(b"www".to_vec()));
        // `k` also matches the Kelvin sign, `s` the long s: the prefix stops there.
        assert_eq!(l("^ak"), Some(b"a".to_vec()));
        assert_eq!(l("^s"), None);
        assert_eq!(l("^(?-i)AB"), Some(b"AB".to_vec()));
        assert_eq!(l("[a]"), None);
        assert_eq!(
            anchored_prefix_lowered("^ab", false).as_deref(),
            Some(&b"ab"[..])
        );
    }

    #[test]
    fn candidates_in_list_order() {
        let pre = |s: &str| Some(s.as_bytes().to_vec().into_boxed_slice());
        let list = vec![
            pre("/a/"),
            None,
            pre("/a/b"),
            pre("/"),
            pre("/c"),
            pre("/a/"),
        ];
        let ix = PrefixIndex::build(&list).unwrap();
        let mut buf = [0; MAX_CANDIDATES];
        assert_eq!(
            ix.candidates(b"/a/b/c", &mut buf),
            Some(&[0, 1, 2, 3, 5][..])
        );
        assert_eq!(ix.candidates(b"/c", &mut buf), Some(&[1, 3, 4][..]));
        assert_eq!(ix.candidates(b"x", &mut buf), Some(&[1][..]));
        assert_eq!(ix.candidates(b"", &mut buf), Some(&[1][..]));
        let many: Vec<_> = (0..20).map(|_| pre("/x")).collect();
        let ix = PrefixIndex::build(&many).unwrap();
        assert_eq!(ix.candidates(b"/x", &mut buf), None);
        assert_eq!(ix.candidates(b"/y", &mut buf), Some(&[][..]));
        assert!(PrefixIndex::build(&[None, None]).is_none());
    }
}
