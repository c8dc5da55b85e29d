//! `Accept-Encoding` negotiation (RFC 9110 12.5.3), sans-I/O and allocation-free.
//!
//! The request's field lines are read as one comma-separated list of
//! `coding [; q=qvalue]` items. A coding's weight is its own item's, else the `*`
//! item's, else 0. `identity` is acceptable unless `identity;q=0` (or `*;q=0` without
//! an `identity` item) excludes it. Among the codings the server offers, in its order
//! of preference, the one with the highest weight wins; equal weights go to the
//! server's preference. A client that weighs `identity` above every offered coding
//! gets identity.
//!
//! Without an `Accept-Encoding` field any coding is acceptable in theory; in practice
//! (and as nginx does) such a client gets identity, since many simple clients could not
//! decode anything else. An empty field means identity only.

use crate::Coding;

/// What a request accepts, in weights of 0..=1000 (qvalues have three decimals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Whether the request had an `Accept-Encoding` field at all.
    pub present: bool,
    gzip: Option<u16>,
    br: Option<u16>,
    zstd: Option<u16>,
    identity: Option<u16>,
    star: Option<u16>,
}

/// The representation to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Encode with this coding.
    Coding(Coding),
    /// Send the content as it is.
    Identity,
}

impl Accepted {
    /// Parses every `Accept-Encoding` field line of a request (none: `present` false).
    /// Items that do not parse (a bad qvalue, a stray parameter) are ignored, as are
    /// codings we do not know.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let mut a = Accepted::default();
        for v in values {
            a.present = true;
            for item in v.split(|&b| b == b',') {
                let Some((name, q)) = parse_item(item) else {
                    continue;
                };
                let slot =
                    if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                        &mut a.gzip
                    } else if name.eq_ignore_ascii_case(b"br") {
                        &mut a.br
                    } else if name.eq_ignore_ascii_case(b"zstd") {
                        &mut a.zstd
                    } else if name.eq_ignore_ascii_case(b"identity") {
                        &mut a.identity
                    } else if name == b"*" {
                        &mut a.star
                    } else {
                        continue;
                    };
                // A coding listed twice: the higher weight (clients do not do this on
                // purpose; the lenient reading never refuses what one item allows).
                *slot = Some(slot.map_or(q, |old| old.max(q)));
            }
        }
        a
    }

    /// The weight of `c` (0: not acceptable).
    pub fn weight(&self, c: Coding) -> u16 {
        let own = match c {
            Coding::Gzip => self.gzip,
            Coding::Br => self.br,
            Coding::Zstd => self.zstd,
        };
        own.or(self.star).unwrap_or(0)
    }

    /// Whether the client can take content encoded with `c` (a response the origin
    /// encoded is passed through only then).
    pub fn accepts(&self, c: Coding) -> bool {
        self.weight(c) > 0
    }

    /// Whether identity (no content coding) is acceptable.
    pub fn identity_ok(&self) -> bool {
        match (self.identity, self.star) {
            (Some(q), _) => q > 0,
            (None, Some(0)) => false,
            _ => true,
        }
    }

    /// The best of `offered` (the server's order of preference) for this request.
    pub fn choose(&self, offered: &[Coding]) -> Choice {
        if !self.present {
            return Choice::Identity;
        }
        let mut best: Option<(Coding, u16)> = None;
        for &c in offered {
            let w = self.weight(c);
            if w > 0 && best.is_none_or(|(_, bw)| w > bw) {
                best = Some((c, w));
            }
        }
        match best {
            // identity listed with a higher weight than every coding: the client's call.
            Some((_, w)) if self.identity.is_some_and(|iq| iq > w) => Choice::Identity,
            Some((c, _)) => Choice::Coding(c),
            None => Choice::Identity,
        }
    }
}

/// One list item: the coding name and its weight (1000 when no `q`). None for an empty
/// item or one whose parameters do not parse.
fn parse_item(item: &[u8]) -> Option<(&[u8], u16)> {
    let mut parts = item.split(|&b| b == b';');
    let name = trim(parts.next()?);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return None;
    }
    let mut q = 1000;
    for p in parts {
        let p = trim(p);
        let (k, v) = match p.iter().position(|&b| b == b'=') {
            Some(i) => (trim(&p[..i]), trim(&p[i + 1..])),
            None => return None,
        };
        if k.eq_ignore_ascii_case(b"q") {
            q = parse_qvalue(v)?;
        }
        // Other parameters are not defined for codings: ignored.
    }
    Some((name, q))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, d) in frac.iter().enumerate() {
        thousandths += u16::from(d - b'0') * [100, 10, 1][i];
    }
    match int[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    fn ae(v: &str) -> Accepted {
        Accepted::parse([v.as_bytes()])
    }

    const ALL: &[Coding] = &[Zstd, Br, Gzip];

    #[test]
    fn the_servers_order_breaks_ties() {
        assert_eq!(ae("gzip, br, zstd").choose(ALL), Choice::Coding(Zstd));
        assert_eq!(ae("gzip, br").choose(ALL), Choice::Coding(Br));
        assert_eq!(ae("gzip").choose(ALL), Choice::Coding(Gzip));
        assert_eq!(ae("gzip, br").choose(&[Gzip, Br]), Choice::Coding(Gzip));
        assert_eq!(ae("x-gzip").choose(ALL), Choice::Coding(Gzip));
        assert_eq!(ae("GZIP").choose(ALL), Choice::Coding(Gzip));
    }

    #[test]
    fn q_values_rank_and_exclude() {
        assert_eq!(ae("gzip;q=1, br;q=0.5").choose(ALL), Choice::Coding(Gzip));
        assert_eq!(
            ae("gzip;q=0.8, zstd;q=0.9").choose(ALL),
            Choice::Coding(Zstd)
        );
        assert_eq!(ae("gzip;q=0, br").choose(&[Gzip]), Choice::Identity);
        assert_eq!(ae("br;q=0").choose(&[Br]), Choice::Identity);
        assert_eq!(ae("gzip ; q=0.001").choose(&[Gzip]), Choice::Coding(Gzip));
        assert_eq!(ae("gzip;Q=0.5").choose(&[Gzip]), Choice::Coding(Gzip));
    }

    #[test]
    fn star_covers_the_unlisted_codings() {
        assert_eq!(ae("*").choose(ALL), Choice::Coding(Zstd));
        assert_eq!(ae("gzip;q=1, *;q=0").choose(ALL), Choice::Coding(Gzip));
        assert_eq!(ae("*;q=0.5, br").choose(ALL), Choice::Coding(Br));
        assert_eq!(ae("*;q=0").choose(ALL), Choice::Identity);
        assert!(!ae("*;q=0").identity_ok());
        assert!(ae("*;q=0, identity").identity_ok());
    }

    #[test]
    fn identity_rules() {
        assert!(ae("gzip").identity_ok());
        assert!(!ae("gzip, identity;q=0").identity_ok());
        assert_eq!(ae("gzip, identity;q=0").choose(ALL), Choice::Coding(Gzip));
        // The client weighs identity above gzip.
        assert_eq!(ae("identity, gzip;q=0.5").choose(ALL), Choice::Identity);
        assert_eq!(ae("identity;q=0.5, gzip").choose(ALL), Choice::Coding(Gzip));
        assert_eq!(ae("identity").choose(ALL), Choice::Identity);
    }

    #[test]
    fn no_field_and_an_empty_field_mean_identity() {
        let none = Accepted::parse(std::iter::empty());
        assert!(!none.present);
        assert_eq!(none.choose(ALL), Choice::Identity);
        assert_eq!(ae("").choose(ALL), Choice::Identity);
        assert!(ae("").identity_ok());
    }

    #[test]
    fn bad_items_are_ignored_not_fatal() {
        assert_eq!(ae("gzip;q=2, br").choose(ALL), Choice::Coding(Br));
        assert_eq!(
            ae("gzip;q=0.5555, br;q=0.1").choose(ALL),
            Choice::Coding(Br)
        );
        assert_eq!(ae("gzip;q, br;q=0.1").choose(ALL), Choice::Coding(Br));
        assert_eq!(ae("g zip, ,,, br").choose(ALL), Choice::Coding(Br));
        assert_eq!(ae("deflate, compress").choose(ALL), Choice::Identity);
        assert_eq!(ae("gzip;level=9").choose(ALL), Choice::Coding(Gzip));
    }

    #[test]
    fn several_field_lines_are_one_list() {
        let a = Accepted::parse([&b"gzip;q=0.5"[..], &b"br"[..]]);
        assert_eq!(a.choose(ALL), Choice::Coding(Br));
        assert!(a.accepts(Gzip) && a.accepts(Br) && !a.accepts(Zstd));
    }

    #[test]
    fn qvalue_grammar() {
        assert_eq!(parse_qvalue(b"1"), Some(1000));
        assert_eq!(parse_qvalue(b"1.000"), Some(1000));
        assert_eq!(parse_qvalue(b"1.001"), None);
        assert_eq!(parse_qvalue(b"0.5"), Some(500));
        assert_eq!(parse_qvalue(b"0.05"), Some(50));
        assert_eq!(parse_qvalue(b"0."), Some(0));
        assert_eq!(parse_qvalue(b".5"), None);
        assert_eq!(parse_qvalue(b"0.5x"), None);
        assert_eq!(parse_qvalue(b""), None);
    }
}
