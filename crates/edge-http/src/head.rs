//! What the request and response parsers share around httparse: the header slots it
//! fills and the rule for a head that is not complete yet.
//!
//! How it fits: [`crate::parse_request`] and [`crate::parse_response`] each run httparse
//! inside [`with_header_slots`] and answer an unfinished head with [`wait_or_too_large`],
//! so the two cannot drift apart on how they bound memory.

use std::mem::MaybeUninit;

use crate::{Limits, ParseError};

/// Header slots kept on the stack; configurations allowing more headers fall back to one
/// heap allocation per parse.
pub(crate) const STACK_HEADERS: usize = 128;

/// Runs `parse` with `max` uninitialised httparse header slots (httparse writes before it
/// reads them, so nothing is zeroed): on the stack up to [`STACK_HEADERS`], else in one
/// heap allocation. (Inlined: it is the body of every parse.)
#[inline(always)]
pub(crate) fn with_header_slots<'b, R>(
    max: usize,
    parse: impl FnOnce(&mut [MaybeUninit<httparse::Header<'b>>]) -> R,
) -> R {
    if max <= STACK_HEADERS {
        let mut stack: [MaybeUninit<httparse::Header<'b>>; STACK_HEADERS] =
            [const { MaybeUninit::uninit() }; STACK_HEADERS];
        parse(&mut stack[..max])
    } else {
        let mut heap = Vec::new();
        heap.resize_with(max, MaybeUninit::uninit);
        parse(&mut heap)
    }
}

/// The answer for a head that is not complete yet: "read more", unless the buffer already
/// holds more than a whole head may (then `too_large`), so a peer can never make us
/// buffer past the limit while we wait for the blank line.
pub(crate) fn wait_or_too_large<T>(
    buf: &[u8],
    limits: &Limits,
    too_large: ParseError,
) -> Result<Option<T>, ParseError> {
    if buf.len() > limits.max_header_bytes {
        Err(too_large)
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_have_the_requested_length() {
        for max in [0, 1, STACK_HEADERS, STACK_HEADERS + 1, 1000] {
            assert_eq!(with_header_slots(max, |s| s.len()), max);
        }
    }

    #[test]
    fn incomplete_heads_wait_up_to_the_limit() {
        let limits = Limits {
            max_header_bytes: 4,
            ..Limits::default()
        };
        let err = ParseError::new(crate::ErrorKind::HeadersTooLarge, "x");
        assert_eq!(
            wait_or_too_large::<()>(b"1234", &limits, err.clone()),
            Ok(None)
        );
        assert_eq!(
            wait_or_too_large::<()>(b"12345", &limits, err.clone()),
            Err(err)
        );
    }
}
