//! The `Date` header, formatted at most once a second per thread.
//!
//! How it fits: every response carries `Date`; formatting an HTTP date per request would
//! cost more than the rest of a 1 KiB response's head, so each thread keeps the current
//! second's text (as nginx's cached time does) and the response builder copies it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The `Last-Modified` of every object: fixed, so `If-Modified-Since` is deterministic.
pub const LAST_MODIFIED: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// A per-thread cache of the current `Date` value.
#[derive(Debug, Default)]
pub struct DateCache {
    second: u64,
    text: String,
}

impl DateCache {
    /// The current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
    pub fn now(&mut self) -> &str {
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}

/// Seconds since the epoch of [`LAST_MODIFIED`].
pub fn last_modified_time() -> SystemTime {
    httpdate::parse_http_date(LAST_MODIFIED).unwrap_or(UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_is_an_http_date_near_now() {
        let mut d = DateCache::default();
        let t = httpdate::parse_http_date(d.now()).unwrap();
        let diff = SystemTime::now().duration_since(t).unwrap_or_default();
        assert!(diff < Duration::from_secs(2), "{diff:?}");
        assert!(d.now().ends_with(" GMT"));
    }

    #[test]
    fn last_modified_parses() {
        assert_eq!(httpdate::fmt_http_date(last_modified_time()), LAST_MODIFIED);
    }
}
