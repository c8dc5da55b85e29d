//! Cache keys, their hashes, and `Vary` variant keys.
//!
//! How it fits: the server builds a *primary key* per request (by default
//! `scheme://host/uri`). When a stored response carries `Vary`, the index remembers the
//! varying header names for that primary key, and each stored variant lives under a
//! *variant key*: the primary key, a `\0`, then the normalised request values of those
//! headers. Every key is hashed with xxh3-128 into a [`KeyHash`], which names the object
//! file on disk and picks the index shard.

use edge_http::HeaderMap;

/// xxh3-128 of a key string.
pub type KeyHash = u128;

/// Separator between the primary key and the variant values (never valid in a URI).
pub const VARIANT_SEP: char = '\0';
/// Separator between the values of different `Vary` headers inside a variant key.
const VALUE_SEP: char = '\u{1}';

/// The hash that names an object.
pub fn key_hash(key: &str) -> KeyHash {
    xxhash_rust::xxh3::xxh3_128(key.as_bytes())
}

/// The 32 lowercase hex digits of a hash (the object's file name).
pub fn hash_hex(hash: KeyHash) -> String {
    let hex = hash_hex_bytes(hash);
    // The bytes are ASCII hex digits.
    String::from_utf8_lossy(&hex).into_owned()
}

/// [`hash_hex`] on the stack: 32 lowercase hex digits, most significant first.
pub fn hash_hex_bytes(hash: KeyHash) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = HEX[((hash >> (4 * (31 - i))) & 0xf) as usize];
    }
    out
}

/// Parse a file name made by [`hash_hex`].
pub fn parse_hash_hex(name: &str) -> Option<KeyHash> {
    if name.len() != 32 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(name, 16).ok()
}

/// The variant key for `primary` when the stored response varies on `vary` (lowercase
/// header names): primary + `\0` + each header's request values, joined with `, `,
/// trimmed, separated by `\u{1}`; an absent header contributes an empty value. With no
/// `vary` names the variant key is the primary key itself.
pub fn variant_key(primary: &str, vary: &[String], req: &HeaderMap) -> String {
    variant_key_with(primary, vary, |name| {
        req.get_all(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()
    })
}

/// [`variant_key`] with the request's header values supplied by a closure (the
/// closure gets a lowercase name and returns every value of that header, in order).
pub fn variant_key_with<F>(primary: &str, vary: &[String], mut values: F) -> String
where
    F: FnMut(&str) -> Vec<String>,
{
    if vary.is_empty() {
        return primary.to_owned();
    }
    let mut k = String::with_capacity(primary.len() + 32);
    k.push_str(primary);
    k.push(VARIANT_SEP);
    for (i, name) in vary.iter().enumerate() {
        if i > 0 {
            k.push(VALUE_SEP);
        }
        let vals = values(name);
        let mut first = true;
        for v in vals.iter().flat_map(|v| v.split(',')) {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            if !first {
                k.push_str(", ");
            }
            first = false;
            // Keep NULs out of keys so the primary key stays recoverable.
            k.extend(v.chars().filter(|&c| c != VARIANT_SEP && c != VALUE_SEP));
        }
    }
    k
}

/// Normalise `Vary` header values into lowercase names (deduplicated, in order).
/// Returns `None` for `Vary: *` (never stored).
pub fn parse_vary<'a, I: IntoIterator<Item = &'a str>>(values: I) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        for name in v.split(',') {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            if name == "*" {
                return None;
            }
            let lower = name.to_ascii_lowercase();
            if !out.contains(&lower) {
                out.push(lower);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Vec<String> + 'a {
        move |name| {
            pairs
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_string())
                .collect()
        }
    }

    #[test]
    fn no_vary_is_the_primary_key() {
        assert_eq!(variant_key_with("k", &[], vals(&[])), "k");
    }

    #[test]
    fn variants_normalise_values() {
        let vary = vec!["accept-encoding".to_string(), "accept-language".to_string()];
        let a = variant_key_with("k", &vary, vals(&[("Accept-Encoding", " gzip ,br ")]));
        let b = variant_key_with("k", &vary, vals(&[("accept-encoding", "gzip, br")]));
        assert_eq!(a, b);
        assert_eq!(a, "k\0gzip, br\u{1}");
        let c = variant_key_with("k", &vary, vals(&[("accept-language", "gzip, br")]));
        assert_ne!(a, c, "values of different headers must not collide");
        assert_eq!(a.split(VARIANT_SEP).next(), Some("k"));
    }

    #[test]
    fn vary_parsing() {
        assert_eq!(
            parse_vary(["Accept-Encoding, accept-encoding", "Origin"]),
            Some(vec!["accept-encoding".into(), "origin".into()])
        );
        assert_eq!(parse_vary(["Origin, *"]), None);
        assert_eq!(parse_vary([""]), Some(vec![]));
    }

    #[test]
    fn hash_hex_bytes_matches_format() {
        for h in [
            0u128,
            1,
            0xabc,
            u128::MAX,
            key_hash("x"),
            key_hash("http://a/b"),
        ] {
            assert_eq!(&hash_hex_bytes(h)[..], format!("{h:032x}").as_bytes());
        }
    }

    #[test]
    fn hash_hex_round_trip() {
        let h = key_hash("http://example.com/");
        let s = hash_hex(h);
        assert_eq!(s.len(), 32);
        assert_eq!(parse_hash_hex(&s), Some(h));
        assert_eq!(parse_hash_hex("xyz"), None);
        assert_eq!(parse_hash_hex(&format!("{s}.tmp.1")), None);
    }
}
