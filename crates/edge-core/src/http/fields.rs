//! What one exchange does to header fields beyond relaying them, as the route decided
//! when the request was routed: the response side ([`OutFields`]: `add_header`,
//! `proxy_hide_header`, `cache_status_header`), applied where every response head ends
//! ([`super::Exchange::end_head`]), and the request side ([`UpstreamFields`]:
//! `proxy_set_header`, rendered once), read by the upstream client.
//!
//! The defaults cost nothing: no allocation, and `end_head` only tests two fields.

use super::Exchange;
use std::rc::Rc;
use std::sync::Arc;

/// Renders the `add_header` lines of a response whose status and cache status are now
/// known (templates with variables; `$status` and `$upstream_cache_status` included).
pub type RenderFields = Rc<dyn Fn(&Exchange, &mut Vec<u8>)>;

/// `add_header` lines for a response.
#[derive(Clone, Default)]
pub enum AddFields {
    #[default]
    None,
    /// Pre-serialised `Name: value\r\n` lines (no variables).
    Static(bytes::Bytes),
    Render(RenderFields),
}

/// nginx adds `add_header` fields (without `always`) to these statuses only.
pub const ADD_HEADER_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// The response side of the route's header control.
#[derive(Clone)]
pub struct OutFields {
    pub add: AddFields,
    /// `add_header_always`: on every status (nginx `always`).
    pub always: bool,
    /// `proxy_hide_header`: lowercase names removed from the head.
    pub hide: Option<Arc<[Box<str>]>>,
    /// `cache_status_header`: send `X-Cache-Status` and `Cache-Status`.
    pub cache_status: bool,
}

impl Default for OutFields {
    fn default() -> Self {
        OutFields {
            add: AddFields::None,
            always: false,
            hide: None,
            cache_status: true,
        }
    }
}

impl OutFields {
    /// Whether `add_header` applies to a response with this status.
    pub fn adds_to(&self, status: u16) -> bool {
        self.always || ADD_HEADER_STATUSES.contains(&status)
    }
}

/// Removes from the field lines of a response head (from `fields_at` to the end of
/// `out`) the fields named in `hide` (lowercase), in place.
pub fn hide_fields(out: &mut Vec<u8>, fields_at: usize, hide: &[Box<str>]) {
    let start = fields_at.min(out.len());
    let (mut r, mut w) = (start, start);
    while r < out.len() {
        let end = match memchr::memchr(b'\n', &out[r..]) {
            Some(i) => r + i + 1,
            None => out.len(),
        };
        let line = &out[r..end];
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(0);
        let name = &line[..name_end];
        let hidden = name_end > 0 && hide.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes()));
        if !hidden {
            if w != r {
                out.copy_within(r..end, w);
            }
            w += end - r;
        }
        r = end;
    }
    out.truncate(w);
}

/// `proxy_set_header` rendered for one request.
#[derive(Debug, Clone, Default)]
pub struct UpstreamFields {
    /// Lowercase names the config sets: the client's fields of these names are not
    /// forwarded (and neither is our own `X-Forwarded-For` when it is one of them).
    pub names: Arc<[Box<str>]>,
    /// `Name: value\r\n` lines of the non-empty values (Host excluded).
    pub lines: Vec<u8>,
    /// The `Host` value, when set: also the TLS server name of an `https://` upstream.
    pub host: Option<String>,
}

impl UpstreamFields {
    /// Whether the config sets (or removes) the field `name`.
    pub fn sets(&self, name: &str) -> bool {
        self.names.iter().any(|n| name.eq_ignore_ascii_case(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_fields_leave_the_rest_in_order() {
        let mut out =
            b"junkHTTP/1.1 200 OK\r\nA: 1\r\nx-amz-id: 2\r\nB: 3\r\nX-AMZ-ID: 4\r\n".to_vec();
        hide_fields(&mut out, 21, &["x-amz-id".into()]);
        assert_eq!(out, b"junkHTTP/1.1 200 OK\r\nA: 1\r\nB: 3\r\n");
        let mut none = b"A: 1\r\n".to_vec();
        hide_fields(&mut none, 0, &["b".into()]);
        assert_eq!(none, b"A: 1\r\n");
        // What comes before the fields (the status line) is never taken for a field.
        let mut sl = b"HTTP/1.1 200 OK\r\n".to_vec();
        hide_fields(&mut sl, 17, &["http/1.1 200 ok".into()]);
        assert_eq!(sl, b"HTTP/1.1 200 OK\r\n");
    }

    #[test]
    fn nginx_statuses_get_add_header() {
        let f = OutFields::default();
        assert!(f.adds_to(200) && f.adds_to(304) && !f.adds_to(404) && !f.adds_to(502));
        let always = OutFields {
            always: true,
            ..OutFields::default()
        };
        assert!(always.adds_to(404) && always.adds_to(500));
    }
}
