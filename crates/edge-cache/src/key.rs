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

/// Keys are already xxh3-128 hashes: hashing them again (SipHash) is wasted work.
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHashHasher(u64);

impl std::hash::Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for non-u128 keys (never in this crate); stay correct anyway.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = (v >> 64) as u64;
    }
}

/// A map keyed by [`KeyHash`], hashed by [`KeyHashHasher`].
pub(crate) type HashMapK<V> =
    std::collections::HashMap<KeyHash, V, std::hash::BuildHasherDefault<KeyHashHasher>>;

/// A set of [`KeyHash`]es, hashed by [`KeyHashHasher`].
pub(crate) type HashSetK =
    std::collections::HashSet<KeyHash, std::hash::BuildHasherDefault<KeyHashHasher>>;

/// Separator between the primary key and the variant values (never valid in a URI).
pub const VARIANT_SEP: char = '\0';
/// Separator between the values of different `Vary` headers inside a variant key.
const VALUE_SEP: char = '\u{1}';
/// Starts the content-coding part of an encoded variant's key (see [`coded_key`]).
pub const CODING_MARK: char = '\u{2}';
/// Starts the slice part of a slice's key (see [`slice_key`]).
pub const SLICE_MARK: char = '\u{3}';

/// The hash that names an object.
pub fn key_hash(key: &str) -> KeyHash {
    twox_hash::XxHash3_128::oneshot(key.as_bytes())
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
        if name == "accept-language" {
            push_languages(&mut k, &vals);
            continue;
        }
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
            k.extend(
                v.chars()
                    .filter(|&c| ![VARIANT_SEP, VALUE_SEP, CODING_MARK, SLICE_MARK].contains(&c)),
            );
        }
    }
    k
}

/// `Accept-Language` values in a canonical form, so that requests that ask for the
/// same languages share a variant: ranges lower-cased and without whitespace, ordered by
/// q-value (highest first) and then by name, each q written only when below 1; ranges
/// with q=0 or an unreadable q are left out. `en, de`, `de, en` and ` eN ,   De` are
/// one variant.
fn push_languages(k: &mut String, vals: &[String]) {
    let mut ranges: Vec<(u16, String)> = Vec::new();
    for el in vals.iter().flat_map(|v| v.split(',')) {
        let mut parts = el.split(';');
        let range: String = parts
            .next()
            .unwrap_or("")
            .trim()
            .chars()
            .filter(|&c| c.is_ascii_alphanumeric() || c == '-' || c == '*')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if range.is_empty() || ranges.len() >= 64 {
            continue;
        }
        let mut q = Some(1000);
        for p in parts {
            if let Some((n, v)) = p.split_once('=') {
                if n.trim().eq_ignore_ascii_case("q") {
                    q = parse_qvalue(v.trim());
                }
            }
        }
        match q {
            Some(q) if q > 0 => ranges.push((q, range)),
            _ => {}
        }
    }
    ranges.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranges.dedup_by(|a, b| a.1 == b.1);
    for (i, (q, r)) in ranges.iter().enumerate() {
        if i > 0 {
            k.push_str(", ");
        }
        k.push_str(r);
        if *q < 1000 {
            k.push_str(&format!(";q=0.{q:03}"));
        }
    }
}

/// An RFC 9110 12.4.2 qvalue in thousandths: `0`, `0.5`, `1`, `1.000`.
fn parse_qvalue(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let f: u16 = format!("{frac:0<3}").parse().ok()?;
    match int {
        "0" => Some(f),
        "1" if f == 0 => Some(1000),
        _ => None,
    }
}

/// The key of a compressed copy of the object stored under `identity_key` (a
/// variant key): `identity_key`, a `\0` unless it has one already (so the primary key
/// stays what precedes the first `\0`, and purges and soft purges of the primary key
/// reach the copy), [`CODING_MARK`], the coding, `.`, and the identity body's id (see
/// [`crate::ObjectMeta::body_id`]). A new body has a new id, so a copy made from an old
/// body is never found for a new one.
pub fn coded_key(identity_key: &str, coding: &str, body_id: u64) -> String {
    let mut k = String::with_capacity(identity_key.len() + coding.len() + 20);
    k.push_str(identity_key);
    if !identity_key.contains(VARIANT_SEP) {
        k.push(VARIANT_SEP);
    }
    k.push(CODING_MARK);
    k.push_str(coding);
    k.push('.');
    for i in (0..16).rev() {
        k.push(char::from(
            b"0123456789abcdef"[((body_id >> (4 * i)) & 0xf) as usize],
        ));
    }
    k
}

/// The key of slice `n` (bytes `n * size ..`) of the object whose primary key is
/// `primary`, cut in slices of `size` bytes (`slice = "1m"`): `primary`,
/// [`SLICE_MARK`], the size and the slice number in decimal, `.` between them. It has
/// no `\0`, so it is a primary key of its own (a slice may have `Vary` variants like
/// any object) and never equals a variant key or a compressed copy's key; it starts
/// with `primary`, so a purge by prefix reaches it. The size is in the key so that a
/// changed `slice` never mixes slices cut differently.
pub fn slice_key(primary: &str, size: u64, n: u64) -> String {
    format!("{primary}{SLICE_MARK}{size}.{n}")
}

/// The purge tag every slice of `primary` carries (a `Cache-Tag` value can hold no
/// control character, so no origin tag equals it): how a purge of the URL finds the
/// slices without knowing the object's length or slice size.
pub fn slice_tag(primary: &str) -> String {
    format!("{SLICE_MARK}slices.{}", hash_hex(key_hash(primary)))
}

/// Whether `key` is an encoded copy made by [`coded_key`] from `identity_key`.
pub fn is_coded_of(key: &str, identity_key: &str) -> bool {
    let Some(rest) = key.strip_prefix(identity_key) else {
        return false;
    };
    let rest = rest.strip_prefix(VARIANT_SEP).unwrap_or(rest);
    rest.starts_with(CODING_MARK)
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
    fn slice_keys_are_their_own_primaries_under_the_object_key() {
        let k = slice_key("http://h/v.mp4", 1 << 20, 7);
        assert_eq!(k, "http://h/v.mp4\u{3}1048576.7");
        assert!(k.starts_with("http://h/v.mp4") && !k.contains(VARIANT_SEP));
        assert_ne!(
            slice_key("http://h/a", 65536, 1),
            slice_key("http://h/a", 131072, 1)
        );
        assert_ne!(
            slice_key("http://h/a", 65536, 12),
            slice_key("http://h/a1", 65536, 2)
        );
        // A request value cannot forge the mark into a variant key.
        let mut h = HeaderMap::new();
        h.insert("x", "a\u{3}1048576.7");
        let vk = variant_key("http://h/v.mp4", &["x".to_string()], &h);
        assert!(!vk.contains(SLICE_MARK));
        assert!(slice_tag("http://h/a").starts_with(SLICE_MARK));
        assert_ne!(slice_tag("http://h/a"), slice_tag("http://h/b"));
    }

    #[test]
    fn coded_keys_keep_the_primary_key_and_name_the_body() {
        let k = coded_key("http://h/a", "gzip", 0xab);
        assert_eq!(k, "http://h/a\0\u{2}gzip.00000000000000ab");
        assert!(is_coded_of(&k, "http://h/a"));
        assert!(!is_coded_of("http://h/a", "http://h/a"));
        assert!(!is_coded_of("http://h/ab\0\u{2}gzip.0", "http://h/a"));
        let vary = vec!["accept-language".to_string()];
        let v = variant_key_with("http://h/a", &vary, vals(&[("Accept-Language", "de\u{2}")]));
        assert_eq!(v, "http://h/a\0de", "the mark never comes from a request");
        let kv = coded_key(&v, "br", 1);
        assert_eq!(kv, "http://h/a\0de\u{2}br.0000000000000001");
        assert!(is_coded_of(&kv, &v));
        assert!(
            !is_coded_of(&kv, "http://h/a"),
            "a copy of one Vary variant only"
        );
        let m = crate::ObjectMeta::new(kv, 200, std::time::SystemTime::now());
        assert_eq!(m.primary_key(), "http://h/a");
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
    fn accept_language_variants_ignore_order_case_and_space() {
        let vary = vec!["accept-language".to_string()];
        let key = |v: &str| variant_key_with("k", &vary, vals(&[("accept-language", v)]));
        let base = key("en, de");
        for same in [
            "de, en",
            "eN, De",
            " en ,   de",
            "de;q=1.0, en",
            "en;q=1, de, fr;q=0",
        ] {
            assert_eq!(key(same), base, "{same:?}");
        }
        assert_ne!(key("en"), base);
        assert_ne!(key("en, de;q=0.5"), base);
        assert_eq!(key("de;q=0.5, en"), key("en,de;q=0.50"));
        // An unreadable q drops that range only.
        assert_eq!(key("en, de, fr;q=2"), base);
        assert_eq!(key(""), key(" , "));
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
