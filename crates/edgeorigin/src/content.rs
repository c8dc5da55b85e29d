//! The deterministic content of every object: which bytes `/obj/<size>/<id>` and
//! `/txt/<size>/<id>` serve, and their xxh3-64 checksums.
//!
//! How it fits: the server never stores a body. It asks [`fill`] for the bytes at any
//! offset, 64 KiB at a time, so a 1 GiB object streams with flat memory, a `Range` costs
//! only its own length, and two processes (or two machines) serve identical bytes. Tests
//! and clients verify bodies against [`checksum_of`] (the `X-Checksum` header) or by
//! regenerating slices with the public [`crate::object_bytes`].
//!
//! - `obj` bytes are a counter-based generator: 8-byte word `i` is the splitmix64
//!   finaliser of `seed + (i+1)·γ`, little-endian, with the seed mixed from (size, id). Any
//!   word is computed without its prefix, and the output is incompressible.
//! - `txt` bytes are fixed-width lines of HTML-like markup built from a small word list
//!   (line `i` from its own counter), so any offset is cheap too and gzip compresses it
//!   about 3-5x.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hasher as _;
use std::sync::OnceLock;
use twox_hash::XxHash3_64;

/// What an object's bytes look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Incompressible pseudo-random bytes (`/obj/`).
    Obj,
    /// Compressible HTML-like text (`/txt/`).
    Txt,
}

/// The splitmix64 increment (2^64 / φ).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
/// wyrand's increment and xor constant.
const WY0: u64 = 0xa076_1d64_78bd_642f;
const WY1: u64 = 0xe703_7ed1_a0b4_28db;
/// Salts that keep `obj` and `txt` seeds apart for the same (size, id).
const SALT_OBJ: u64 = 0x6f62_6a2d_6564_6765; // "obj-edge"
const SALT_TXT: u64 = 0x7478_742d_6564_6765; // "txt-edge"
/// Size of the scratch buffer used to hash a body without allocating it whole.
pub const CHUNK: usize = 64 * 1024;
/// Bound on the per-thread (and the shared) checksum cache (entries); cleared when full.
const CHECKSUM_CACHE_ENTRIES: usize = 64 * 1024;

/// The splitmix64 output function: a bijective 64-bit mix.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The generator seed of one object. Size takes part so that `/obj/4k/1` is not a prefix
/// of `/obj/1m/1` (a cache that confused them would be caught).
fn seed(kind: Kind, size: u64, id: u64) -> u64 {
    let salt = match kind {
        Kind::Obj => SALT_OBJ,
        Kind::Txt => SALT_TXT,
    };
    mix64(mix64(size ^ salt).wrapping_add(id).wrapping_mul(GAMMA) ^ salt)
}

/// Word `i` of the stream seeded by `seed`.
#[inline(always)]
fn word(seed: u64, i: u64) -> u64 {
    wymix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(WY0)))
}

/// The wyrand output function: one 64×64→128-bit multiply, folded. About twice as fast
/// as splitmix64's two multiplies and three shifts, and the bytes stay incompressible.
#[inline(always)]
fn wymix(state: u64) -> u64 {
    let t = (state as u128).wrapping_mul((state ^ WY1) as u128);
    (t as u64) ^ ((t >> 64) as u64)
}

/// Writes the bytes `[offset, offset + out.len())` of object (kind, size, id) into `out`.
///
/// Bytes past `size` continue the same stream (they are not part of the object); callers
/// keep `offset + out.len() <= size`.
pub fn fill(kind: Kind, size: u64, id: u64, offset: u64, out: &mut [u8]) {
    match kind {
        Kind::Obj => fill_obj(seed(kind, size, id), offset, out),
        Kind::Txt => fill_txt(seed(kind, size, id), offset, out),
    }
}

/// Words generated per block in [`fill_obj`] (4 KiB on the stack).
const BLOCK_WORDS: usize = 512;

/// Words `first..first + out.len()` of the stream, little-endian in memory.
#[inline(always)]
fn words_into(seed: u64, first: u64, out: &mut [u64]) {
    let mut state = seed.wrapping_add(first.wrapping_add(1).wrapping_mul(WY0));
    // Four independent words per step: their multiplies overlap in the pipeline (about
    // twice the throughput of one word per step).
    let mut quads = out.chunks_exact_mut(4);
    for q in &mut quads {
        q[0] = wymix(state).to_le();
        q[1] = wymix(state.wrapping_add(WY0)).to_le();
        q[2] = wymix(state.wrapping_add(WY0.wrapping_mul(2))).to_le();
        q[3] = wymix(state.wrapping_add(WY0.wrapping_mul(3))).to_le();
        state = state.wrapping_add(WY0.wrapping_mul(4));
    }
    for x in quads.into_remainder() {
        *x = wymix(state).to_le();
        state = state.wrapping_add(WY0);
    }
}

/// The bytes of a word array.
fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: `u64` has no padding and every byte pattern is a valid `u8`; the pointer
    // and length cover exactly the memory of `words`, whose borrow the result keeps
    // (same lifetime), and `u8` has alignment 1.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

fn fill_obj(seed: u64, offset: u64, out: &mut [u8]) {
    let mut pos = 0usize;
    let mut w = offset / 8;
    // Unaligned head: the tail of one word.
    let skip = (offset % 8) as usize;
    if skip != 0 {
        let bytes = word(seed, w).to_le_bytes();
        let n = (8 - skip).min(out.len());
        out[..n].copy_from_slice(&bytes[skip..skip + n]);
        pos = n;
        w += 1;
    }
    // The aligned middle, a block of words at a time: a plain loop over a stack array,
    // then one copy. It is the origin's hot path, and it also has to be quick in
    // unoptimised (test) builds, where a call per 8 bytes (an iterator, a tiny memcpy)
    // made the 1 GiB test crawl.
    let mut block = [0u64; BLOCK_WORDS];
    let mut chunks = out[pos..].chunks_exact_mut(BLOCK_WORDS * 8);
    for c in &mut chunks {
        words_into(seed, w, &mut block);
        c.copy_from_slice(as_bytes(&block));
        w += BLOCK_WORDS as u64;
    }
    let rest = chunks.into_remainder();
    let whole = rest.len() / 8;
    words_into(seed, w, &mut block[..whole]);
    rest[..whole * 8].copy_from_slice(&as_bytes(&block)[..whole * 8]);
    w += whole as u64;
    // Unaligned tail: the head of one word.
    let rest = &mut rest[whole * 8..];
    if !rest.is_empty() {
        let bytes = word(seed, w).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&bytes[..n]);
    }
}

/// Width of one generated text line, newline included.
const LINE: usize = 80;

/// Words the text is built from. 64 words keep gzip at roughly 3-5x, like real HTML.
const WORDS: [&str; 64] = [
    "the", "cache", "edge", "origin", "object", "request", "response", "header", "bytes", "server",
    "client", "proxy", "stream", "body", "range", "status", "content", "length", "control", "max",
    "age", "private", "public", "stale", "fresh", "hit", "miss", "purge", "tag", "vary", "cookie",
    "etag", "modified", "since", "match", "none", "chunked", "transfer", "encoding", "gzip",
    "brotli", "zstd", "disk", "memory", "index", "shard", "lock", "collapse", "worker", "thread",
    "core", "socket", "accept", "listen", "reuse", "port", "kernel", "ring", "queue", "pool",
    "read", "write", "file", "and",
];

/// Opening and closing tags a line is wrapped in.
const TAGS: [(&str, &str); 8] = [
    ("<p>", "</p>"),
    ("<li>", "</li>"),
    ("<h2>", "</h2>"),
    ("<td>", "</td>"),
    ("<div class=\"item\">", "</div>"),
    ("<span>", "</span>"),
    ("<p class=\"note\">", "</p>"),
    ("<a href=\"/obj/10k/1\">", "</a>"),
];

/// Builds text line `i` (exactly [`LINE`] bytes, ending in `\n`).
fn text_line(seed: u64, i: u64, line: &mut [u8; LINE]) {
    let mut state = seed.wrapping_add(i.wrapping_mul(GAMMA).rotate_left(17));
    let mut next = || {
        state = state.wrapping_add(GAMMA);
        mix64(state)
    };
    let r = next();
    let (open, close) = TAGS[(r & 7) as usize];
    let mut pos = 0;
    line[..open.len()].copy_from_slice(open.as_bytes());
    pos += open.len();
    // Room for words: the line minus the closing tag and the newline.
    let limit = LINE - close.len() - 1;
    let mut bits = r >> 3;
    let mut avail = 61;
    let mut first = true;
    loop {
        if avail < 6 {
            bits = next();
            avail = 64;
        }
        let w = WORDS[(bits & 63) as usize].as_bytes();
        bits >>= 6;
        avail -= 6;
        let need = w.len() + usize::from(!first);
        if pos + need > limit {
            break;
        }
        if !first {
            line[pos] = b' ';
            pos += 1;
        }
        line[pos..pos + w.len()].copy_from_slice(w);
        pos += w.len();
        first = false;
    }
    line[pos..pos + close.len()].copy_from_slice(close.as_bytes());
    pos += close.len();
    line[pos..LINE - 1].fill(b' ');
    line[LINE - 1] = b'\n';
}

/// Distinct lines in the text table: enough that a gzip window (32 KiB, ~400 lines)
/// rarely sees a line twice, so compression comes from the words, as in real HTML.
const TABLE_LINES: usize = 4096;
/// Seed of the text table (part of the content definition: changing it changes every
/// `/txt/` body).
const TABLE_SEED: u64 = 0x7465_7874_7461_626c; // "texttabl"

/// The line table, built once per process (320 KiB). Text line `i` of an object is
/// `table[hash(seed, i) % TABLE_LINES]`: a hash and a copy per 80 bytes, so `/txt/`
/// streams at memory speed instead of assembling words per request.
fn line_table() -> &'static [[u8; LINE]] {
    static TABLE: OnceLock<Vec<[u8; LINE]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..TABLE_LINES as u64)
            .map(|i| {
                let mut line = [0u8; LINE];
                text_line(TABLE_SEED, i, &mut line);
                line
            })
            .collect()
    })
}

fn fill_txt(seed: u64, offset: u64, out: &mut [u8]) {
    let table = line_table();
    let mut pos = 0usize;
    let mut i = offset / LINE as u64;
    let mut skip = (offset % LINE as u64) as usize;
    while pos < out.len() {
        let line = &table[(word(seed, i) % TABLE_LINES as u64) as usize];
        let n = (LINE - skip).min(out.len() - pos);
        out[pos..pos + n].copy_from_slice(&line[skip..skip + n]);
        pos += n;
        skip = 0;
        i += 1;
    }
}

thread_local! {
    /// Checksums this thread computed, by (kind, size, id).
    static CHECKSUMS: RefCell<Checksums> = RefCell::new(HashMap::new());
}

/// Objects from this size on also share their checksum between threads: hashing one
/// takes milliseconds to seconds (2 GiB: about one), a lock far less.
pub const SHARED_CHECKSUM_MIN: u64 = 16 << 20;

/// Checksums by (kind, size, id).
type Checksums = HashMap<(Kind, u64, u64), u64>;

/// Checksums of big objects ([`SHARED_CHECKSUM_MIN`] and up) any thread computed.
fn shared_checksums() -> &'static std::sync::Mutex<Checksums> {
    static SHARED: OnceLock<std::sync::Mutex<Checksums>> = OnceLock::new();
    SHARED.get_or_init(Default::default)
}

/// xxh3-64 of the whole body of (kind, size, id), computed in [`CHUNK`] pieces (never the
/// whole body in memory) and remembered per thread, since sizes and ids repeat; a big
/// object's is computed once per process (an experiment on huge objects asks each once,
/// with HEAD, before it measures: `edgebench video`).
pub fn checksum_of(kind: Kind, size: u64, id: u64) -> u64 {
    let key = (kind, size, id);
    if let Some(v) = CHECKSUMS.with(|c| c.borrow().get(&key).copied()) {
        return v;
    }
    let shared = size >= SHARED_CHECKSUM_MIN;
    let known = shared
        .then(|| {
            let m = shared_checksums().lock().unwrap_or_else(|e| e.into_inner());
            m.get(&key).copied()
        })
        .flatten();
    let v = known.unwrap_or_else(|| compute_checksum(kind, size, id));
    if shared && known.is_none() {
        let mut m = shared_checksums().lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= CHECKSUM_CACHE_ENTRIES {
            m.clear();
        }
        m.insert(key, v);
    }
    remember_checksum(kind, size, id, v);
    v
}

/// Records a checksum computed elsewhere (the body cache hashes what it generates).
pub fn remember_checksum(kind: Kind, size: u64, id: u64, value: u64) {
    CHECKSUMS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= CHECKSUM_CACHE_ENTRIES {
            c.clear();
        }
        c.insert((kind, size, id), value);
    });
}

fn compute_checksum(kind: Kind, size: u64, id: u64) -> u64 {
    if size <= CHUNK as u64 {
        let mut buf = [0u8; CHUNK];
        let body = &mut buf[..size as usize];
        fill(kind, size, id, 0, body);
        return twox_hash::XxHash3_64::oneshot(body);
    }
    let mut buf = vec![0u8; CHUNK];
    let mut h = XxHash3_64::new();
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(CHUNK as u64) as usize;
        fill(kind, size, id, off, &mut buf[..n]);
        h.write(&buf[..n]);
        off += n as u64;
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: Kind, size: u64, id: u64) -> Vec<u8> {
        let mut v = vec![0u8; size as usize];
        fill(kind, size, id, 0, &mut v);
        v
    }

    #[test]
    fn any_slice_equals_the_same_slice_of_the_whole() {
        for kind in [Kind::Obj, Kind::Txt] {
            let whole = body(kind, 1000, 7);
            for start in [0usize, 1, 7, 8, 9, 79, 80, 81, 333, 999] {
                for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 100] {
                    let end = (start + len).min(1000);
                    let mut part = vec![0u8; end - start];
                    fill(kind, 1000, 7, start as u64, &mut part);
                    assert_eq!(part, &whole[start..end], "{kind:?} {start}+{len}");
                }
            }
        }
    }

    #[test]
    fn ids_sizes_and_kinds_differ() {
        let a = body(Kind::Obj, 4096, 1);
        assert_ne!(a, body(Kind::Obj, 4096, 2));
        assert_ne!(
            &a[..1024],
            &body(Kind::Obj, 1024, 1)[..],
            "size is part of the seed"
        );
        assert_ne!(a, body(Kind::Txt, 4096, 1));
        assert_eq!(a, body(Kind::Obj, 4096, 1), "deterministic");
    }

    #[test]
    fn known_first_bytes_never_change() {
        // Pinned so that a change to the generator (which would break every stored cache
        // and every cross-version comparison) is a deliberate, visible edit.
        let b = body(Kind::Obj, 16, 1);
        let pinned = word(seed(Kind::Obj, 16, 1), 0).to_le_bytes();
        assert_eq!(&b[..8], &pinned);
        assert_eq!(
            checksum_of(Kind::Obj, 16, 1),
            twox_hash::XxHash3_64::oneshot(&b)
        );
    }

    #[test]
    fn as_bytes_is_the_little_endian_layout() {
        let words = [0x0102_0304_0506_0708u64.to_le(), u64::MAX.to_le()];
        let b = as_bytes(&words);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[8..], &[0xff; 8]);
        assert!(as_bytes(&[]).is_empty());
    }

    #[test]
    fn block_path_equals_word_by_word() {
        // Lengths around the block size, at aligned and unaligned offsets.
        let s = seed(Kind::Obj, 1 << 20, 11);
        for offset in [0u64, 3, 8, 4096, 4099] {
            for len in [0usize, 5, 4095, 4096, 4097, 8192 + 13] {
                let mut out = vec![0u8; len];
                fill_obj(s, offset, &mut out);
                let expect: Vec<u8> = (offset..offset + len as u64)
                    .map(|o| word(s, o / 8).to_le_bytes()[(o % 8) as usize])
                    .collect();
                assert_eq!(out, expect, "offset {offset} len {len}");
            }
        }
    }

    #[test]
    fn obj_bytes_look_random() {
        let b = body(Kind::Obj, 1 << 16, 3);
        let mut counts = [0u32; 256];
        for &x in &b {
            counts[x as usize] += 1;
        }
        // 65536 bytes over 256 values: 256 each on average; a broken generator is far off.
        assert!(
            counts.iter().all(|&c| (150..400).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn text_is_ascii_lines_of_markup() {
        let t = body(Kind::Txt, 8000, 5);
        assert!(t.is_ascii());
        let s = String::from_utf8(t).unwrap();
        for line in s.lines() {
            assert_eq!(line.len(), LINE - 1);
            assert!(line.starts_with('<'), "{line:?}");
            assert!(line.trim_end().ends_with('>'), "{line:?}");
        }
        assert_eq!(s.lines().count(), 100);
    }

    #[test]
    fn streaming_checksum_equals_one_shot() {
        for (kind, size) in [
            (Kind::Obj, 0),
            (Kind::Obj, 65536),
            (Kind::Obj, 200_001),
            (Kind::Txt, 150_000),
        ] {
            let b = body(kind, size, 9);
            assert_eq!(
                compute_checksum(kind, size, 9),
                twox_hash::XxHash3_64::oneshot(&b)
            );
            assert_eq!(
                checksum_of(kind, size, 9),
                twox_hash::XxHash3_64::oneshot(&b)
            );
        }
    }

    #[test]
    fn big_checksums_are_shared_between_threads() {
        let key = (Kind::Obj, SHARED_CHECKSUM_MIN, 77);
        let small = (Kind::Obj, SHARED_CHECKSUM_MIN - 1, 77);
        let v = std::thread::spawn(move || {
            checksum_of(small.0, small.1, small.2);
            checksum_of(key.0, key.1, key.2)
        })
        .join()
        .unwrap();
        let m = shared_checksums().lock().unwrap().clone();
        assert_eq!(m.get(&key), Some(&v), "another thread computed it: shared");
        assert!(!m.contains_key(&small), "small ones stay per thread");
        // This thread finds it there (and remembers it).
        assert_eq!(checksum_of(key.0, key.1, key.2), v);
        assert_eq!(
            v,
            twox_hash::XxHash3_64::oneshot(&body(key.0, key.1, key.2))
        );
        assert_eq!(CHECKSUMS.with(|c| c.borrow().get(&key).copied()), Some(v));
    }
}
