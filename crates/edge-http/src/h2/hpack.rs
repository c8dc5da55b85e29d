//! HPACK (RFC 7541): the decoder of request header blocks, with its dynamic table and
//! the limits a server needs against hostile blocks, and the encoder of response
//! header blocks, which writes straight from a response head's field lines.

use super::huffman;
use std::collections::VecDeque;

/// The static table (RFC 7541 Appendix A), index 1 first.
pub const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The size an entry counts for in a dynamic table and a header list (RFC 7541 4.1).
pub const ENTRY_OVERHEAD: usize = 32;

/// Why a header block cannot be decoded: a connection error (COMPRESSION_ERROR, or
/// ENHANCE_YOUR_CALM for [`DecodeError::WayTooLarge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Not valid HPACK: the connection's decoding state is lost.
    Compression(&'static str),
    /// The list decodes to more than four times the limit: a bomb, not a request.
    WayTooLarge,
}

/// A dynamic table: entries newest first, each `name ++ value` with the name's length.
#[derive(Default)]
struct Dynamic {
    entries: VecDeque<(Box<[u8]>, usize)>,
    size: usize,
    max: usize,
    /// Entries ever inserted (an entry's absolute number is its insertion count).
    inserted: u64,
}

impl Dynamic {
    fn new(max: usize) -> Dynamic {
        Dynamic {
            max,
            ..Default::default()
        }
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let Some((e, _)) = self.entries.pop_back() else {
                break;
            };
            self.size -= e.len() + ENTRY_OVERHEAD;
        }
    }

    fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// Inserts name ++ value (RFC 7541 4.4: an entry larger than the table empties
    /// it and is not added).
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.inserted += 1;
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        let mut e = Vec::with_capacity(name.len() + value.len());
        e.extend_from_slice(name);
        e.extend_from_slice(value);
        self.entries.push_front((e.into_boxed_slice(), name.len()));
        self.size += size;
    }

    /// The HPACK index (after the static table's) of the entry inserted `abs`-th
    /// (1-based), if it is still in the table.
    fn index_of(&self, abs: u64) -> Option<usize> {
        let pos = (self.inserted - abs) as usize;
        (pos < self.entries.len()).then_some(STATIC.len() + 1 + pos)
    }

    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let (e, n) = self.entries.get(i)?;
        Some((&e[..*n], &e[*n..]))
    }
}

/// A decoded header list: the fields' bytes in one buffer.
#[derive(Default)]
pub struct HeaderList {
    buf: Vec<u8>,
    /// (start, name length, value length) in `buf`.
    fields: Vec<(u32, u32, u32)>,
    /// The list's size as RFC 7541 counts it (each field's bytes plus 32).
    pub size: usize,
    /// Past the limit: the fields are decoded (the table must follow) but not kept.
    pub over_limit: bool,
}

impl HeaderList {
    pub fn clear(&mut self) {
        self.buf.clear();
        self.fields.clear();
        self.size = 0;
        self.over_limit = false;
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|&(s, n, v)| {
            let (s, n, v) = (s as usize, n as usize, v as usize);
            (&self.buf[s..s + n], &self.buf[s + n..s + n + v])
        })
    }

    /// Drops the buffers' memory beyond what a typical request needs (a connection
    /// keeps its list between requests).
    pub fn shrink(&mut self) {
        self.buf.shrink_to(4096);
        self.fields.shrink_to(64);
    }
}

/// The decoder of one connection's request header blocks.
pub struct Decoder {
    table: Dynamic,
    /// The table size we announced (SETTINGS_HEADER_TABLE_SIZE): the most a size
    /// update may ask for.
    allowed: usize,
}

impl Decoder {
    pub fn new(allowed: usize) -> Decoder {
        Decoder {
            table: Dynamic::new(allowed),
            allowed,
        }
    }

    /// Decodes one complete header block into `list` (cleared first). Fields past
    /// `limit` (the list's RFC 7541 size) are decoded but not kept, and
    /// `list.over_limit` says so; past four times the limit decoding stops with
    /// [`DecodeError::WayTooLarge`].
    pub fn decode(
        &mut self,
        mut block: &[u8],
        list: &mut HeaderList,
        limit: usize,
    ) -> Result<(), DecodeError> {
        list.clear();
        let mut first = true;
        while let Some(&b) = block.first() {
            if b & 0x80 != 0 {
                // Indexed field.
                let i = int(&mut block, 7)?;
                let (name, value) = self.entry(i)?;
                add(list, name, value, limit)?;
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update: only before the first field.
                if !first {
                    return Err(DecodeError::Compression("table size update after a field"));
                }
                let n = int(&mut block, 5)?;
                if n > self.allowed {
                    return Err(DecodeError::Compression("table size over the limit"));
                }
                self.table.set_max(n);
                continue;
            } else {
                let (prefix, index) = if b & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    // Without indexing (0000) or never indexed (0001).
                    (4, false)
                };
                let i = int(&mut block, prefix)?;
                let start = list.buf.len();
                // The name (an index, or a literal), then the value, onto the buffer.
                if i == 0 {
                    string(&mut block, &mut list.buf)?;
                } else {
                    let (name, _) = self.entry(i)?;
                    list.buf.extend_from_slice(name);
                }
                let name_len = list.buf.len() - start;
                string(&mut block, &mut list.buf)?;
                let value_len = list.buf.len() - start - name_len;
                if index {
                    let (name, value) = list.buf[start..].split_at(name_len);
                    self.table.insert(name, value);
                }
                keep(list, start, name_len, value_len, limit)?;
            }
            first = false;
        }
        Ok(())
    }

    /// Field `i` of the static table, then the dynamic one (RFC 7541 2.3.3).
    fn entry(&self, i: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        if i == 0 {
            return Err(DecodeError::Compression("index 0"));
        }
        if let Some((n, v)) = STATIC.get(i - 1) {
            return Ok((n.as_bytes(), v.as_bytes()));
        }
        self.table
            .get(i - 1 - STATIC.len())
            .ok_or(DecodeError::Compression("index past the table"))
    }
}

/// Counts a field whose bytes are at the end of `list.buf`; keeps it if the list is
/// within the limit.
fn keep(
    list: &mut HeaderList,
    start: usize,
    name_len: usize,
    value_len: usize,
    limit: usize,
) -> Result<(), DecodeError> {
    list.size += name_len + value_len + ENTRY_OVERHEAD;
    if list.size > limit.saturating_mul(4) {
        return Err(DecodeError::WayTooLarge);
    }
    if list.size > limit || list.over_limit {
        list.over_limit = true;
        list.buf.truncate(start);
        return Ok(());
    }
    list.fields
        .push((start as u32, name_len as u32, value_len as u32));
    Ok(())
}

fn add(list: &mut HeaderList, name: &[u8], value: &[u8], limit: usize) -> Result<(), DecodeError> {
    let size = list.size + name.len() + value.len() + ENTRY_OVERHEAD;
    if size > limit || list.over_limit {
        // Counted only: an indexed field of an oversized list is not copied.
        list.size = size;
        list.over_limit = true;
        if size > limit.saturating_mul(4) {
            return Err(DecodeError::WayTooLarge);
        }
        return Ok(());
    }
    let start = list.buf.len();
    list.buf.extend_from_slice(name);
    list.buf.extend_from_slice(value);
    keep(list, start, name.len(), value.len(), limit)
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 5.1), at most 2^28 (no header
/// block needs more; a longer one is hostile).
fn int(block: &mut &[u8], n: u32) -> Result<usize, DecodeError> {
    const TRUNC: DecodeError = DecodeError::Compression("truncated integer");
    let mask = (1u32 << n) - 1;
    let (&first, rest) = block.split_first().ok_or(TRUNC)?;
    *block = rest;
    let mut v = (first as u32) & mask;
    if v < mask {
        return Ok(v as usize);
    }
    let mut shift = 0;
    loop {
        let (&b, rest) = block.split_first().ok_or(TRUNC)?;
        *block = rest;
        if shift > 21 {
            return Err(DecodeError::Compression("integer too large"));
        }
        v += ((b & 0x7f) as u32) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(v as usize);
        }
    }
}

/// A string literal (RFC 7541 5.2), appended to `out`.
fn string(block: &mut &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let huff = block.first().is_some_and(|b| b & 0x80 != 0);
    let len = int(block, 7)?;
    if len > block.len() {
        return Err(DecodeError::Compression("truncated string"));
    }
    let (s, rest) = block.split_at(len);
    *block = rest;
    if huff {
        huffman::decode(s, out).map_err(|_| DecodeError::Compression("bad Huffman code"))
    } else {
        out.extend_from_slice(s);
        Ok(())
    }
}

/// Appends an HPACK integer with an `n`-bit prefix; `first` holds the prefix's
/// pattern bits.
pub fn put_int(out: &mut Vec<u8>, n: u32, first: u8, v: usize) {
    let mask = (1usize << n) - 1;
    if v < mask {
        out.push(first | v as u8);
        return;
    }
    out.push(first | mask as u8);
    let mut v = v - mask;
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a string literal: Huffman-coded when that is shorter.
pub fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    // Short values (digits, sizes, dates' parts) rarely gain enough to pay for the
    // count; long ones (a cache-control, a content-type) usually do.
    if s.len() >= 8 {
        let h = huffman::encoded_len(s);
        if h < s.len() {
            put_int(out, 7, 0x80, h);
            huffman::encode(s, out);
            return;
        }
    }
    put_int(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

/// The name part of a literal field (RFC 7541 6.2): the static table's index of the
/// name in an `n`-bit prefix after `pattern`, or 0 there and the name as a string.
fn put_name(out: &mut Vec<u8>, n: u32, pattern: u8, static_index: u8, lower: &[u8]) {
    put_int(out, n, pattern, static_index as usize);
    if static_index == 0 {
        put_str(out, lower);
    }
}

/// What a response field is to the encoder.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FieldKind {
    /// Connection-specific (framing included): not sent over HTTP/2.
    Hop,
    /// Sent, its value entered in the dynamic table (it repeats from one response to
    /// the next).
    Indexed,
    /// Sent as a literal never entered in the table: its value changes per response
    /// (entering it would evict the fields that do repeat).
    Churning,
}

/// A response field name as a connection's responses write it (case and all), and
/// what the encoder makes of it.
struct Name {
    raw: Box<[u8]>,
    /// Lowercase; empty for a name that is not a valid field name (left out).
    lower: Box<[u8]>,
    kind: FieldKind,
    /// The static table's index of the name (0: none).
    static_index: u8,
    /// The value last entered in the dynamic table under this name, and its absolute
    /// number there.
    last: Option<(Box<[u8]>, u64)>,
}

/// Names remembered per connection (past it, new names are classified every time),
/// and the longest remembered.
const MEMO_NAMES: usize = 64;
const MEMO_NAME_LEN: usize = 64;

/// The encoder of one connection's response header blocks.
pub struct Encoder {
    /// The client's table, as large as its SETTINGS_HEADER_TABLE_SIZE allows (at most
    /// [`Encoder::MAX_TABLE`]).
    table: Dynamic,
    /// A size update to send at the start of the next block: the smallest size since
    /// the last block, then the current one (RFC 7541 4.2).
    update: Option<(usize, usize)>,
    names: Vec<Name>,
    /// The name found after the last one looked up (responses repeat their order).
    cursor: usize,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// The most dynamic table we use, whatever the client allows: also the size every
    /// client starts with (RFC 7541's default).
    pub const MAX_TABLE: usize = 4096;

    pub fn new() -> Encoder {
        Encoder {
            table: Dynamic::new(Encoder::MAX_TABLE),
            update: None,
            names: Vec::new(),
            cursor: 0,
        }
    }

    /// The client's SETTINGS_HEADER_TABLE_SIZE.
    pub fn set_peer_table_size(&mut self, n: usize) {
        let n = n.min(Encoder::MAX_TABLE);
        if n == self.table.max && self.update.is_none() {
            return;
        }
        let low = self.update.map_or(n, |(low, _)| low.min(n));
        self.update = Some((low.min(self.table.max), n));
        self.table.set_max(n);
    }

    /// Starts a header block with `:status`.
    pub fn status(&mut self, out: &mut Vec<u8>, status: u16) {
        if let Some((low, now)) = self.update.take() {
            if low < now {
                put_int(out, 5, 0x20, low);
            }
            put_int(out, 5, 0x20, now);
        }
        let i = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if i > 0 {
            out.push(0x80 | i);
            return;
        }
        // Literal without indexing, name :status (8).
        out.push(0x08);
        let s = status.min(999);
        out.extend_from_slice(&[
            3,
            b'0' + (s / 100) as u8,
            b'0' + (s / 10 % 10) as u8,
            b'0' + (s % 10) as u8,
        ]);
    }

    /// Adds a field, its name as the response head wrote it. Returns false for a field
    /// left out (connection-specific, or not a valid field name).
    pub fn field(&mut self, out: &mut Vec<u8>, raw_name: &[u8], value: &[u8]) -> bool {
        let Some(i) = self.name(raw_name) else {
            // Not remembered (the memo is full, or the name too long): encoded as a
            // literal, classified afresh.
            let Some(lower) = lowercase_name(raw_name) else {
                return false;
            };
            if field_kind(&lower) == FieldKind::Hop {
                return false;
            }
            put_name(out, 4, 0x00, 0, &lower);
            put_str(out, value);
            return true;
        };
        let n = &self.names[i];
        if n.lower.is_empty() || n.kind == FieldKind::Hop {
            return false;
        }
        if n.kind == FieldKind::Indexed {
            if let Some((v, abs)) = &n.last {
                if **v == *value {
                    if let Some(idx) = self.table.index_of(*abs) {
                        put_int(out, 7, 0x80, idx);
                        return true;
                    }
                }
            }
            let size = n.lower.len() + value.len() + ENTRY_OVERHEAD;
            if size <= self.table.max / 2 {
                // Literal with incremental indexing.
                put_name(out, 6, 0x40, n.static_index, &n.lower);
                put_str(out, value);
                self.table.insert(&n.lower, value);
                let abs = self.table.inserted;
                self.names[i].last = Some((value.into(), abs));
                return true;
            }
        }
        // Literal without indexing.
        put_name(out, 4, 0x00, n.static_index, &n.lower);
        put_str(out, value);
        true
    }

    /// The memo entry of a name, added if new and there is room.
    fn name(&mut self, raw: &[u8]) -> Option<usize> {
        let hit = match self.names.get(self.cursor) {
            Some(n) if *n.raw == *raw => Some(self.cursor),
            _ => self.names.iter().position(|n| *n.raw == *raw),
        };
        if let Some(i) = hit {
            self.cursor = i + 1;
            return Some(i);
        }
        if self.names.len() >= MEMO_NAMES || raw.len() > MEMO_NAME_LEN {
            return None;
        }
        let lower = lowercase_name(raw).unwrap_or_default();
        let kind = field_kind(&lower);
        let static_index = STATIC
            .iter()
            .position(|(n, _)| n.as_bytes() == &*lower)
            .map_or(0, |i| i as u8 + 1);
        self.names.push(Name {
            raw: raw.into(),
            lower: lower.into(),
            kind,
            static_index,
            last: None,
        });
        self.cursor = self.names.len();
        Some(self.names.len() - 1)
    }
}

/// A token character (RFC 9110 5.6.2).
pub fn is_token_byte(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.'
        | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// A field name lowercased, or None if it is not a token.
fn lowercase_name(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.is_empty() || !raw.iter().all(|&b| is_token_byte(b)) {
        return None;
    }
    Some(raw.to_ascii_lowercase())
}

/// What a response field is to HTTP/2 and HTTP/3 (`lower`: its lowercase name): the
/// one list of connection-specific and churning fields for HPACK and QPACK alike.
pub fn field_kind(lower: &[u8]) -> FieldKind {
    match lower {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"upgrade" | b"transfer-encoding" => {
            FieldKind::Hop
        }
        // Values that change per response (per object): entering them in the table
        // would evict the fields that repeat (server, content-type, cache-control,
        // x-cache-status) for entries rarely used again. `content-length` is not among
        // them (objects of one size repeat it), nor is `date` (the same for every
        // response of a second).
        b"age" | b"etag" | b"last-modified" | b"expires" | b"cache-status" | b"x-checksum"
        | b"set-cookie" | b"content-range" | b"location" => FieldKind::Churning,
        _ => FieldKind::Indexed,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::hex;
    use super::*;

    fn fields(l: &HeaderList) -> Vec<(String, String)> {
        l.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 (without Huffman) and C.4 (with): three requests on one
    /// connection, the dynamic table carried from one to the next.
    #[test]
    fn rfc_7541_request_examples() {
        for blocks in [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ] {
            let base = [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ];
            let mut second = base.to_vec();
            second.push(("cache-control", "no-cache"));
            let third = [
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ];
            let want: [(&[(&str, &str)], usize); 3] = [(&base, 57), (&second, 110), (&third, 164)];
            let mut d = Decoder::new(4096);
            let mut l = HeaderList::default();
            for (block, (fields_want, size)) in blocks.iter().zip(want) {
                d.decode(&hex(block), &mut l, 16384).unwrap();
                assert_eq!(fields(&l), pairs(fields_want));
                assert_eq!(d.table.size, size);
            }
            assert!(!l.over_limit);
        }
    }

    /// RFC 7541 C.5: responses with a 256-byte table, entries evicted.
    #[test]
    fn eviction_follows_rfc_7541_c5() {
        let mut d = Decoder::new(256);
        let mut l = HeaderList::default();
        let b1 = "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d";
        d.decode(&hex(b1), &mut l, 16384).unwrap();
        assert_eq!(d.table.size, 222);
        d.decode(&hex("4803 3330 37c1 c0bf"), &mut l, 16384)
            .unwrap();
        assert_eq!(fields(&l)[0], (":status".into(), "307".into()));
        assert_eq!(fields(&l)[3].1, "https://www.example.com");
        assert_eq!(d.table.size, 222);
        assert_eq!(d.table.entries.len(), 4);
    }

    #[test]
    fn limits_and_malformed_blocks() {
        let mut d = Decoder::new(4096);
        let mut l = HeaderList::default();
        // A 4000-byte entry, then references to it.
        let mut b = vec![0x40];
        put_str(&mut b, b"x-bomb");
        put_int(&mut b, 7, 0, 4000);
        b.extend(std::iter::repeat_n(b'b', 4000));
        let mut bomb = b.clone();
        bomb.extend(std::iter::repeat_n(0xbe, 500));
        assert_eq!(
            d.decode(&bomb, &mut l, 16384),
            Err(DecodeError::WayTooLarge)
        );
        let mut d = Decoder::new(4096);
        let mut over = b.clone();
        over.extend(std::iter::repeat_n(0xbe, 4));
        over.extend_from_slice(&[0x82]);
        d.decode(&over, &mut l, 16384).unwrap();
        assert!(l.over_limit);
        assert_eq!(l.len(), 4, "fields kept before the limit");
        // The table followed: the entry is there for the next block.
        d.decode(&[0xbe], &mut l, 16384).unwrap();
        assert_eq!(l.iter().next().unwrap().0, b"x-bomb");
        for bad in [
            &[0x80][..],                           // index 0
            &[0xff, 0x80],                         // truncated integer
            &[0xc0],                               // index past the tables
            &[0x82, 0x3f, 0xe1, 0x1f],             // size update after a field
            &[0x3f, 0xe2, 0x1f],                   // size update over the limit (4097)
            &[0x40, 0x05, b'a'],                   // truncated string
            &[0x00, 0x81, 0x00, 0x00],             // bad Huffman (padding of zeros)
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // integer too large
        ] {
            let mut d = Decoder::new(4096);
            assert!(
                matches!(
                    d.decode(bad, &mut l, 16384),
                    Err(DecodeError::Compression(_))
                ),
                "{bad:x?}"
            );
        }
        // A size update to 0 first is fine.
        let mut d = Decoder::new(4096);
        d.decode(&[0x20, 0x82], &mut l, 16384).unwrap();
        assert_eq!(l.len(), 1);
    }

    fn encode(e: &mut Encoder, status: u16, f: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        e.status(&mut out, status);
        for (n, v) in f {
            e.field(&mut out, n.as_bytes(), v.as_bytes());
        }
        out
    }

    /// What the encoder writes, decoded by our decoder (as a client's would), over
    /// several responses on one connection, table size changes included.
    #[test]
    fn encoder_round_trips_and_indexes_what_repeats() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let mut l = HeaderList::default();
        let resp: &[(&str, &str)] = &[
            ("Server", "edgecache"),
            ("Date", "Sun, 29 Nov 2026 12:00:00 GMT"),
            ("Content-Type", "application/octet-stream"),
            ("Content-Length", "1024"),
            ("ETag", "\"abc\""),
            ("Connection", "keep-alive"),
            ("X-Cache-Status", "HIT"),
            ("Age", "3"),
            ("bad name", "x"),
        ];
        let want = pairs(&[
            (":status", "200"),
            ("server", "edgecache"),
            ("date", "Sun, 29 Nov 2026 12:00:00 GMT"),
            ("content-type", "application/octet-stream"),
            ("content-length", "1024"),
            ("etag", "\"abc\""),
            ("x-cache-status", "HIT"),
            ("age", "3"),
        ]);
        let first = encode(&mut e, 200, resp);
        d.decode(&first, &mut l, 16384).unwrap();
        assert_eq!(fields(&l), want);
        let second = encode(&mut e, 200, resp);
        d.decode(&second, &mut l, 16384).unwrap();
        assert_eq!(fields(&l), want);
        // The repeated fields are one byte each; etag and age literals.
        assert!(second.len() < 30, "{} bytes: {second:x?}", second.len());
        // Another status, another value.
        let third = encode(
            &mut e,
            429,
            &[("Server", "edgecache"), ("X-Cache-Status", "MISS")],
        );
        d.decode(&third, &mut l, 16384).unwrap();
        assert_eq!(
            fields(&l),
            pairs(&[
                (":status", "429"),
                ("server", "edgecache"),
                ("x-cache-status", "MISS")
            ])
        );
        // The client shrinks its table to 0, then allows 100.
        e.set_peer_table_size(0);
        e.set_peer_table_size(100);
        let fourth = encode(&mut e, 200, resp);
        assert_eq!(&fourth[..2], &[0x20, 0x3f], "{fourth:x?}");
        d.decode(&fourth, &mut l, 16384).unwrap();
        assert_eq!(fields(&l), want);
        assert!(d.table.size <= 100);
        for _ in 0..50 {
            let b = encode(&mut e, 200, resp);
            d.decode(&b, &mut l, 16384).unwrap();
            assert_eq!(fields(&l), want);
        }
    }

    /// Per-response values stay out of the table; fields that repeat go in;
    /// connection-specific ones are not sent.
    #[test]
    fn field_kinds() {
        for n in [
            "age",
            "etag",
            "x-checksum",
            "cache-status",
            "last-modified",
            "set-cookie",
        ] {
            assert_eq!(field_kind(n.as_bytes()), FieldKind::Churning, "{n}");
        }
        for n in [
            "server",
            "content-type",
            "content-length",
            "cache-control",
            "x-cache-status",
            "date",
        ] {
            assert_eq!(field_kind(n.as_bytes()), FieldKind::Indexed, "{n}");
        }
        for n in ["connection", "keep-alive", "transfer-encoding", "upgrade"] {
            assert_eq!(field_kind(n.as_bytes()), FieldKind::Hop, "{n}");
        }
    }

    #[test]
    fn integers_round_trip() {
        for n in [4, 5, 6, 7] {
            for v in [
                0,
                1,
                14,
                15,
                16,
                30,
                31,
                62,
                63,
                126,
                127,
                128,
                1337,
                1 << 20,
            ] {
                let mut out = Vec::new();
                put_int(&mut out, n, 0, v);
                let mut s = &out[..];
                assert_eq!(int(&mut s, n).unwrap(), v);
                assert!(s.is_empty());
            }
        }
    }
}
