//! `[[geo]]` variables: an address (the client's, or a source template's value) looked
//! up in a table of networks ([`crate::access::geo::GeoTable`]).

use super::ctx::Ctx;
use super::template::Template;
use crate::access::geo::GeoTable;
use std::net::IpAddr;
use std::sync::Arc;

/// Longest source value parsed as an address (an IPv6 address with an IPv4 tail is 45
/// bytes); a longer one is not an address.
const MAX_ADDR_TEXT: usize = 64;

/// One compiled `[[geo]]`.
#[derive(Debug, Clone)]
pub struct Geo {
    /// None: the client address (`$remote_addr`), read without rendering.
    pub source: Option<Template>,
    pub table: Arc<GeoTable>,
    /// The value when no network holds the address or the source is not an address.
    pub default: Box<str>,
}

impl Geo {
    /// The value for this request.
    #[inline]
    pub fn value(&self, ctx: &Ctx<'_>) -> &str {
        let ip = match &self.source {
            None => Some(ctx.client.peer.ip()),
            Some(t) => {
                let mut buf = Vec::with_capacity(48);
                t.render(ctx, &mut buf);
                parse_addr(&buf)
            }
        };
        ip.and_then(|ip| self.table.lookup(ip))
            .unwrap_or(&self.default)
    }
}

/// A source value as an address: the whole value, spaces around it ignored (no port,
/// no list: `1.2.3.4, 5.6.7.8` is not an address and takes the default).
fn parse_addr(v: &[u8]) -> Option<IpAddr> {
    let v = v.trim_ascii();
    if v.len() > MAX_ADDR_TEXT {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_values_parse_as_whole_addresses() {
        assert_eq!(parse_addr(b" 10.0.0.1 "), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(
            parse_addr(b"::ffff:10.0.0.1"),
            Some("::ffff:10.0.0.1".parse().unwrap())
        );
        for bad in [
            &b""[..],
            b"10.0.0.1, 10.0.0.2",
            b"10.0.0.1:80",
            b"[::1]",
            b"x",
            &[0xff; 70],
        ] {
            assert_eq!(parse_addr(bad), None, "{bad:?}");
        }
    }
}
