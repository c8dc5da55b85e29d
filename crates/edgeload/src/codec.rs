//! Sans-I/O HTTP/1.1 response reader: head parsing with `httparse`, then our own body
//! framing (Content-Length, chunked, close-delimited).
//!
//! How it fits: a connection ([`crate::conn`]) reads socket bytes into one reused buffer
//! and calls [`ResponseReader::advance`] on the unread part; the reader says how many
//! bytes it consumed and whether a response completed. Body bytes are skipped in place
//! (never copied); with `--verify` they are hashed on the way past. Pipelined responses
//! are handled by calling `advance` again on what is left. Every size is bounded and
//! every malformed input is an error value, never a panic: the server under test is
//! hostile input like any other.

use crate::verify::{BodyCheck, Verdict};

/// Largest response head (status line plus headers) accepted.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header fields in one response head.
pub const MAX_HEADERS: usize = 64;
/// Longest chunk-size line (hex size plus extensions).
pub const MAX_CHUNK_LINE: usize = 4096;
/// Most bytes of trailer fields after the last chunk.
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Why a response could not be read. Each one closes the connection and counts as a
/// read error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    Head(httparse::Error),
    HeadTooLarge,
    BadContentLength,
    BadChunkSize,
    ChunkLineTooLong,
    MissingChunkCrlf,
    TrailersTooLarge,
    /// The connection closed in the middle of a response that had a defined length.
    Truncated,
}

/// Body framing of the response being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length { remaining: u64 },
    ChunkSize,
    ChunkData { remaining: u64 },
    ChunkCrlf,
    Trailers { seen: usize },
    UntilClose,
}

/// One response, read completely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub status: u16,
    /// False when the server asked to close (`Connection: close`, HTTP/1.0 without
    /// keep-alive, or a close-delimited body).
    pub keep_alive: bool,
    /// Bytes of head plus body (plus chunk framing).
    pub bytes: u64,
    pub verdict: Verdict,
}

/// Result of one [`ResponseReader::advance`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Everything given was consumed (or a partial head is waiting): read more.
    NeedMore,
    Done(Completed),
}

/// The response reader. One per connection, reused for every response.
pub struct ResponseReader {
    state: State,
    status: u16,
    keep_alive: bool,
    bytes: u64,
    verify: Option<BodyCheck>,
}

impl ResponseReader {
    pub fn new(verify: bool) -> Self {
        ResponseReader {
            state: State::Head,
            status: 0,
            keep_alive: true,
            bytes: 0,
            verify: verify.then(BodyCheck::new),
        }
    }

    /// Forgets any partial response (after the connection was replaced).
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.bytes = 0;
    }

    /// True when part of a response has been consumed.
    pub fn mid_response(&self) -> bool {
        self.state != State::Head
    }

    /// Consumes bytes of `buf` (the unread part of the read buffer). Returns how many
    /// were consumed and whether a response completed. When it completed, the caller
    /// calls again on the rest (pipelining). A partial head is never consumed, so the
    /// caller keeps it in its buffer and reads more.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(usize, Step), ParseError> {
        let mut pos = 0;
        loop {
            let avail = &buf[pos..];
            match self.state {
                State::Head => {
                    let Some(used) = self.parse_head(avail)? else {
                        return Ok((pos, Step::NeedMore));
                    };
                    pos += used;
                    self.bytes += used as u64;
                    if let Some(done) = self.after_head() {
                        return Ok((pos, Step::Done(done)));
                    }
                }
                State::Length { remaining } | State::ChunkData { remaining } => {
                    let is_length = matches!(self.state, State::Length { .. });
                    let take = (avail.len() as u64).min(remaining) as usize;
                    self.body(&avail[..take]);
                    pos += take;
                    let remaining = remaining - take as u64;
                    if is_length && remaining == 0 {
                        return Ok((pos, Step::Done(self.complete())));
                    }
                    self.state = match (is_length, remaining) {
                        (true, _) => State::Length { remaining },
                        (false, 0) => State::ChunkCrlf,
                        (false, _) => State::ChunkData { remaining },
                    };
                    if take == avail.len() {
                        return Ok((pos, Step::NeedMore));
                    }
                }
                State::ChunkSize => {
                    let Some(line) =
                        take_line(avail, MAX_CHUNK_LINE, ParseError::ChunkLineTooLong)?
                    else {
                        return Ok((pos, Step::NeedMore));
                    };
                    let size = parse_chunk_size(&avail[..line.content])?;
                    pos += line.total;
                    self.bytes += line.total as u64;
                    self.state = if size == 0 {
                        State::Trailers { seen: 0 }
                    } else {
                        State::ChunkData { remaining: size }
                    };
                }
                State::ChunkCrlf => {
                    let used = match avail {
                        [] | [b'\r'] => return Ok((pos, Step::NeedMore)),
                        [b'\r', b'\n', ..] => 2,
                        [b'\n', ..] => 1,
                        _ => return Err(ParseError::MissingChunkCrlf),
                    };
                    pos += used;
                    self.bytes += used as u64;
                    self.state = State::ChunkSize;
                }
                State::Trailers { seen } => {
                    let Some(line) =
                        take_line(avail, MAX_TRAILER_BYTES, ParseError::TrailersTooLarge)?
                    else {
                        return Ok((pos, Step::NeedMore));
                    };
                    pos += line.total;
                    self.bytes += line.total as u64;
                    if line.content == 0 {
                        return Ok((pos, Step::Done(self.complete())));
                    }
                    let seen = seen + line.total;
                    if seen > MAX_TRAILER_BYTES {
                        return Err(ParseError::TrailersTooLarge);
                    }
                    self.state = State::Trailers { seen };
                }
                State::UntilClose => {
                    self.body(avail);
                    return Ok((buf.len(), Step::NeedMore));
                }
            }
        }
    }

    /// Body bytes of the current response that may be dropped unread: what is left of
    /// a `Content-Length` body or of a chunk, when bodies are not verified (0 otherwise,
    /// and outside a body). The caller discards up to that many bytes straight from the
    /// socket (`MSG_TRUNC`, no copy) and reports them with [`ResponseReader::discarded`].
    pub fn discardable(&self) -> u64 {
        match self.state {
            _ if self.verify.is_some() => 0,
            State::Length { remaining } | State::ChunkData { remaining } => remaining,
            _ => 0,
        }
    }

    /// `n` body bytes (at most [`ResponseReader::discardable`]) were dropped unread: as
    /// if [`ResponseReader::advance`] had consumed them; `Some` when they end the
    /// response.
    pub fn discarded(&mut self, n: u64) -> Option<Completed> {
        let left = self.discardable();
        debug_assert!(n <= left, "{n} discarded of {left}");
        let n = n.min(left);
        self.bytes += n;
        match (self.state, left - n) {
            (State::Length { .. }, 0) => return Some(self.complete()),
            (State::Length { .. }, remaining) => self.state = State::Length { remaining },
            (State::ChunkData { .. }, 0) => self.state = State::ChunkCrlf,
            (State::ChunkData { .. }, remaining) => self.state = State::ChunkData { remaining },
            _ => {}
        }
        None
    }

    /// The peer closed the connection. A close-delimited body is then complete; any
    /// other partial response is truncated. `Ok(None)`: nothing was in progress.
    pub fn eof(&mut self) -> Result<Option<Completed>, ParseError> {
        match self.state {
            State::Head => Ok(None),
            State::UntilClose => Ok(Some(self.complete())),
            _ => {
                self.reset();
                Err(ParseError::Truncated)
            }
        }
    }

    #[inline]
    fn body(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        if let Some(v) = &mut self.verify {
            v.update(bytes);
        }
    }

    /// Parses a complete head (Ok(Some(len))) or reports a partial one (Ok(None)); sets
    /// the status, keep-alive and framing fields.
    fn parse_head(&mut self, avail: &[u8]) -> Result<Option<usize>, ParseError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let used = match resp.parse(avail) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if avail.len() >= MAX_HEAD_BYTES => {
                return Err(ParseError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadTooLarge),
            Err(e) => return Err(ParseError::Head(e)),
        };
        if used > MAX_HEAD_BYTES {
            return Err(ParseError::HeadTooLarge);
        }
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let mut keep_alive = !http10;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut checksum: Option<&[u8]> = None;
        for h in resp.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let n = parse_content_length(h.value)?;
                if length.is_some_and(|l| l != n) {
                    return Err(ParseError::BadContentLength);
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                // Chunked is only the framing when it is the last coding.
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in h.value.split(|&b| b == b',') {
                    let t = token.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") && http10 {
                        keep_alive = true;
                    }
                }
            } else if name.eq_ignore_ascii_case(b"x-checksum") {
                checksum = Some(h.value);
            }
        }
        self.status = status;
        self.keep_alive = keep_alive;
        // Interim 1xx responses (except 101) are skipped: the real one follows.
        if (100..200).contains(&status) && status != 101 {
            self.state = State::Head;
            return Ok(Some(used));
        }
        if let Some(v) = &mut self.verify {
            v.start(checksum);
        }
        self.state =
            if status == 101 || status == 204 || status == 304 || (100..200).contains(&status) {
                State::Length { remaining: 0 }
            } else if chunked {
                State::ChunkSize
            } else if let Some(n) = length {
                State::Length { remaining: n }
            } else {
                self.keep_alive = false;
                State::UntilClose
            };
        Ok(Some(used))
    }

    /// After a head: completes at once when there is no body; marks interim heads.
    fn after_head(&mut self) -> Option<Completed> {
        match self.state {
            State::Head => None, // interim 1xx, keep reading heads
            State::Length { remaining: 0 } => Some(self.complete()),
            _ => None,
        }
    }

    fn complete(&mut self) -> Completed {
        let done = Completed {
            status: self.status,
            keep_alive: self.keep_alive,
            bytes: self.bytes,
            verdict: self
                .verify
                .as_ref()
                .map_or(Verdict::Skipped, BodyCheck::finish),
        };
        self.state = State::Head;
        self.bytes = 0;
        done
    }
}

/// A line found in a buffer: `content` bytes before the line end, `total` including it.
struct Line {
    content: usize,
    total: usize,
}

/// Finds a line ending in LF (CR before it optional). `Ok(None)`: not complete yet.
fn take_line(avail: &[u8], max: usize, too_long: ParseError) -> Result<Option<Line>, ParseError> {
    let window = &avail[..avail.len().min(max + 2)];
    match memchr::memchr(b'\n', window) {
        Some(i) => {
            let content = if i > 0 && window[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            Ok(Some(Line {
                content,
                total: i + 1,
            }))
        }
        None if avail.len() > max + 1 => Err(too_long),
        None => Ok(None),
    }
}

/// Content-Length: digits only, at most 19 of them (fits u64).
fn parse_content_length(v: &[u8]) -> Result<u64, ParseError> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(ParseError::BadContentLength);
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// `1a;ext=1` -> 26. At most 15 hex digits, so sizes stay far from overflow.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let end = line
        .iter()
        .position(|&b| b == b';' || b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    let digits = &line[..end];
    if digits.is_empty() || digits.len() > 15 {
        return Err(ParseError::BadChunkSize);
    }
    let mut n = 0u64;
    for &d in digits {
        let v = (d as char).to_digit(16).ok_or(ParseError::BadChunkSize)?;
        n = n * 16 + u64::from(v);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twox_hash::XxHash3_64;

    /// Feeds `input` in pieces of at most `step` bytes, the way a socket would deliver it,
    /// keeping unconsumed bytes like the connection's buffer does.
    fn feed(
        r: &mut ResponseReader,
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<Completed>, bool), ParseError> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for part in input.chunks(step.max(1)) {
            buf.extend_from_slice(part);
            loop {
                let (used, st) = r.advance(&buf)?;
                buf.drain(..used);
                match st {
                    Step::Done(c) => out.push(c),
                    Step::NeedMore => break,
                }
            }
        }
        if let Some(c) = r.eof()? {
            out.push(c);
        }
        Ok((out, buf.is_empty()))
    }

    fn shotgun(input: &[u8], verify: bool) -> Vec<Completed> {
        let mut first = None;
        for step in 1..=input.len() {
            let mut r = ResponseReader::new(verify);
            let (got, empty) =
                feed(&mut r, input, step).unwrap_or_else(|e| panic!("step {step}: {e:?}"));
            assert!(empty, "step {step}: leftover bytes");
            if let Some(f) = &first {
                assert_eq!(f, &got, "step {step}");
            } else {
                first = Some(got);
            }
        }
        first.unwrap()
    }

    #[test]
    fn content_length_pipelined() {
        let one = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let two = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let input = [&one[..], &two[..]].concat();
        let got = shotgun(&input, false);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].status, got[0].keep_alive, got[0].bytes),
            (200, true, one.len() as u64)
        );
        assert_eq!((got[1].status, got[1].keep_alive), (404, false));
        assert_eq!(got[0].verdict, Verdict::Skipped);
    }

    /// Reads `input` as the connection does with discarding on: whenever its buffer is
    /// empty and the reader is inside a body, up to `step` body bytes are dropped unread
    /// (`discarded`) instead of read; otherwise up to `step` bytes are read and framed.
    fn feed_discarding(r: &mut ResponseReader, input: &[u8], step: usize) -> Vec<Completed> {
        let (mut buf, mut at, mut out) = (Vec::new(), 0, Vec::new());
        while at < input.len() {
            let skip = r.discardable().min(step as u64) as usize;
            if buf.is_empty() && skip > 0 {
                let n = skip.min(input.len() - at);
                at += n;
                out.extend(r.discarded(n as u64));
                continue;
            }
            let n = step.min(input.len() - at);
            buf.extend_from_slice(&input[at..at + n]);
            at += n;
            loop {
                let (used, st) = r.advance(&buf).unwrap();
                buf.drain(..used);
                match st {
                    Step::Done(c) => out.push(c),
                    Step::NeedMore => break,
                }
            }
        }
        out.extend(r.eof().unwrap());
        out
    }

    #[test]
    fn discarded_bodies_frame_as_read_ones() {
        let big = vec![b'x'; 100_000];
        let input = [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"[..],
            &big,
            b"HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"186a0\r\n",
            &big,
            b"\r\n4\r\nwxyz\r\n0\r\nX-T: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        ]
        .concat();
        let read = shotgun(&input, false);
        assert_eq!(read.len(), 4);
        for step in [1, 7, 4096, 65536, 1 << 20] {
            let got = feed_discarding(&mut ResponseReader::new(false), &input, step);
            assert_eq!(got, read, "step {step}");
        }
        // Verified bodies are never dropped: they must be hashed.
        let mut v = ResponseReader::new(true);
        v.advance(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
            .unwrap();
        assert_eq!(v.discardable(), 0);
        // Outside a body there is nothing to drop.
        let mut r = ResponseReader::new(false);
        assert_eq!(r.discardable(), 0);
        r.advance(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab")
            .unwrap();
        assert_eq!(r.discardable(), 7);
        assert_eq!(r.discarded(7).map(|c| (c.status, c.bytes)), Some((200, 47)));
        assert_eq!(r.discardable(), 0);
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                      5;name=v\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n\
                      HTTP/1.1 204 No Content\r\n\r\n";
        let got = shotgun(input, false);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, 200);
        assert!(got[0].keep_alive);
        assert_eq!(got[1].status, 204);
    }

    #[test]
    fn close_delimited_body_ends_at_eof() {
        let input = b"HTTP/1.1 200 OK\r\n\r\nsome body until close";
        let got = shotgun(input, false);
        assert_eq!(got.len(), 1);
        assert!(!got[0].keep_alive);
        assert_eq!(got[0].bytes, input.len() as u64);
    }

    #[test]
    fn interim_responses_are_skipped_and_http10_closes() {
        let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let got = shotgun(input, false);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].status, got[0].keep_alive), (200, false));
        let ka = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
        assert!(shotgun(ka, false)[0].keep_alive);
    }

    #[test]
    fn verify_hashes_bodies_in_every_framing() {
        let body = b"0123456789abcdef0123456789";
        let sum = format!("{:016x}", XxHash3_64::oneshot(body));
        let cl = format!(
            "HTTP/1.1 200 OK\r\nX-Checksum: {sum}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let ch = format!("HTTP/1.1 200 OK\r\nx-checksum: {sum}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n012\r\n17\r\n");
        let bad = format!(
            "HTTP/1.1 200 OK\r\nX-Checksum: {sum}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let none = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
        let mut input = cl.into_bytes();
        input.extend_from_slice(body);
        input.extend_from_slice(ch.as_bytes());
        input.extend_from_slice(&body[3..]);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        input.extend_from_slice(bad.as_bytes());
        let mut corrupt = body.to_vec();
        corrupt[7] ^= 1;
        input.extend_from_slice(&corrupt);
        input.extend_from_slice(none.as_bytes());
        let v: Vec<Verdict> = shotgun(&input, true).iter().map(|c| c.verdict).collect();
        assert_eq!(
            v,
            vec![
                Verdict::Ok,
                Verdict::Ok,
                Verdict::Mismatch,
                Verdict::NoChecksum
            ]
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let cases: &[(&[u8], ParseError)] = &[
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                ParseError::BadContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                ParseError::BadContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                ParseError::BadContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                ParseError::BadChunkSize,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
                ParseError::BadChunkSize,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc",
                ParseError::MissingChunkCrlf,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc",
                ParseError::Truncated,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                ParseError::Truncated,
            ),
        ];
        for (input, want) in cases {
            let mut r = ResponseReader::new(true);
            assert_eq!(
                feed(&mut r, input, 7).unwrap_err(),
                *want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let mut r = ResponseReader::new(false);
        assert!(matches!(
            r.advance(b"garbage\r\n\r\n"),
            Err(ParseError::Head(_))
        ));
        let huge = [
            b"HTTP/1.1 200 OK\r\nX: ".as_slice(),
            &vec![b'a'; MAX_HEAD_BYTES],
        ]
        .concat();
        assert_eq!(
            ResponseReader::new(false).advance(&huge),
            Err(ParseError::HeadTooLarge)
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(
            ResponseReader::new(false).advance(many.as_bytes()),
            Err(ParseError::HeadTooLarge)
        );
        let long_chunk = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;".as_slice(),
            &[b'x'; 5000],
        ]
        .concat();
        assert_eq!(
            ResponseReader::new(false).advance(&long_chunk),
            Err(ParseError::ChunkLineTooLong)
        );
        let trailers: String = (0..2000).map(|i| format!("T{i}: vvvvvv\r\n")).collect();
        let t = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n{trailers}\r\n");
        assert_eq!(
            ResponseReader::new(false).advance(t.as_bytes()),
            Err(ParseError::TrailersTooLarge)
        );
    }

    #[test]
    fn partial_head_is_not_consumed() {
        let mut r = ResponseReader::new(false);
        assert_eq!(
            r.advance(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap(),
            (0, Step::NeedMore)
        );
        assert!(!r.mid_response());
        let (used, st) = r
            .advance(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab")
            .unwrap();
        assert_eq!((used, st), (40, Step::NeedMore));
        assert!(r.mid_response());
    }
}
