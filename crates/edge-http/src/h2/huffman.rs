//! HPACK's Huffman code (RFC 7541 5.2, Appendix B): a decoder that takes four bits at
//! a time through a state table built once from the code table, and an encoder.

use super::huffman_table::CODES;
use std::sync::OnceLock;

/// One step of the decoder: from a state (an inner node of the code tree), four bits.
#[derive(Clone, Copy, Default)]
struct Step {
    /// The inner node the four bits lead to.
    next: u8,
    /// The symbol they completed, if any (at most one: no code is shorter than five
    /// bits).
    sym: u8,
    flags: u8,
}

const EMIT: u8 = 1;
/// The bits reach EOS, or a code that does not exist: the string is malformed.
const FAIL: u8 = 2;
/// After these bits the decoder stands where a string may end: at the root, or at most
/// seven bits into it along the all-ones path (the padding, RFC 7541 5.2).
const ACCEPT: u8 = 4;

struct Table {
    steps: Vec<[Step; 16]>,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(build)
}

/// A node of the code tree: children by bit; a leaf is `LEAF | symbol`.
const LEAF: u16 = 0x8000;

fn build() -> Table {
    // Inner nodes: [child for 0, child for 1]; 0 = none yet (the root is never a child).
    let mut nodes: Vec<[u16; 2]> = vec![[0, 0]];
    for (sym, &(code, len)) in CODES.iter().enumerate() {
        let mut n = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                nodes[n][bit] = LEAF | sym as u16;
            } else {
                if nodes[n][bit] == 0 {
                    nodes.push([0, 0]);
                    nodes[n][bit] = (nodes.len() - 1) as u16;
                }
                n = nodes[n][bit] as usize;
            }
        }
    }
    // 256 inner nodes for 257 leaves: each fits in a u8.
    debug_assert_eq!(nodes.len(), 256);
    // Where a string may end: the nodes reached from the root by up to seven 1 bits.
    let mut accept = vec![false; nodes.len()];
    let mut n = 0usize;
    accept[0] = true;
    for _ in 0..7 {
        let c = nodes[n][1];
        if c & LEAF != 0 {
            break;
        }
        n = c as usize;
        accept[n] = true;
    }
    let steps = (0..nodes.len())
        .map(|start| {
            let mut row = [Step::default(); 16];
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut n = start;
                for i in (0..4).rev() {
                    let c = nodes[n][(nibble >> i) & 1];
                    if c & LEAF != 0 {
                        let sym = c & !LEAF;
                        if sym == 256 {
                            step.flags |= FAIL;
                            break;
                        }
                        step.sym = sym as u8;
                        step.flags |= EMIT;
                        n = 0;
                    } else {
                        n = c as usize;
                    }
                }
                step.next = n as u8;
                if accept[n] {
                    step.flags |= ACCEPT;
                }
            }
            row
        })
        .collect();
    Table { steps }
}

/// A Huffman-coded string that is malformed: EOS inside, or padding longer than seven
/// bits or not all ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHuffman;

/// Decodes a Huffman-coded string onto `out`.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), BadHuffman> {
    let t = table();
    out.reserve(src.len() * 8 / 5 + 1);
    let mut state = 0usize;
    let mut flags = ACCEPT;
    for &b in src {
        for nibble in [b >> 4, b & 0xf] {
            let s = t.steps[state][nibble as usize];
            if s.flags & FAIL != 0 {
                return Err(BadHuffman);
            }
            if s.flags & EMIT != 0 {
                out.push(s.sym);
            }
            state = s.next as usize;
            flags = s.flags;
        }
    }
    if flags & ACCEPT == 0 {
        return Err(BadHuffman);
    }
    Ok(())
}

/// The length of `src` Huffman-coded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded, padded with ones.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut n = 0u32;
    for &b in src {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | code as u64;
        n += len as u32;
        while n >= 8 {
            n -= 8;
            out.push((acc >> n) as u8);
        }
    }
    if n > 0 {
        out.push(((acc << (8 - n)) | (0xff >> n)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::hex;
    use super::*;

    /// RFC 7541 C.4 and C.6: the Huffman-coded strings of its examples.
    #[test]
    fn rfc_7541_examples() {
        for (text, coded) in [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("302", "6402"),
            ("private", "aec3 771a 4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
            ),
            ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
            (
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        ] {
            let mut out = Vec::new();
            decode(&hex(coded), &mut out).unwrap();
            assert_eq!(out, text.as_bytes());
            let mut enc = Vec::new();
            encode(text.as_bytes(), &mut enc);
            assert_eq!(enc, hex(coded), "{text}");
            assert_eq!(encoded_len(text.as_bytes()), enc.len());
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for len in [0, 1, 2, 7, 255, all.len()] {
            let mut enc = Vec::new();
            encode(&all[..len], &mut enc);
            let mut out = Vec::new();
            decode(&enc, &mut out).unwrap();
            assert_eq!(out, &all[..len]);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_errors() {
        // 'a' is 00011 (5 bits): padded with 111 it is 0x1f.
        let mut out = Vec::new();
        decode(&[0x1f], &mut out).unwrap();
        assert_eq!(out, b"a");
        // Padded with zeros: not a prefix of EOS.
        assert!(decode(&[0x18], &mut Vec::new()).is_err());
        // A whole byte of padding (eight ones) after a full byte.
        assert!(decode(&[0x1f, 0xff], &mut Vec::new()).is_err());
        // EOS itself (30 ones).
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()).is_err());
        // Empty: fine.
        decode(&[], &mut Vec::new()).unwrap();
    }
}
