//! Whose request it is: the client address of a connection and of each request
//! (`docs/client-address.md`).
//!
//! How it fits: three addresses, from the socket up.
//! - [`super::Conn::peer`]: the TCP peer, as `accept(2)` gave it. Never changes.
//! - [`super::Conn::client`]: the connection's client. On a `proxy_protocol = true`
//!   listener the PROXY header's source (the net layer reads it before TLS or HTTP),
//!   unless `real_ip.header = "proxy_protocol"` and the peer is not in `real_ip.from`;
//!   the TCP peer otherwise, and for a header without an address (`UNKNOWN`, `LOCAL`).
//! - [`super::Exchange::client_addr`]: the request's client, `$remote_addr`: with
//!   `real_ip` set to a request field, the address that field names when the
//!   connection's client is in `from` ([`RealIp::resolve`], nginx's realip walk), else
//!   the connection's client. The access log, the `X-Forwarded-For` sent upstream and
//!   the PURGE allow-list use it.

use crate::config::validate::Cidr;
use std::net::{IpAddr, SocketAddr};

/// `real_ip`, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealIp {
    /// Trusted proxies.
    pub from: Vec<Cidr>,
    pub source: RealIpSource,
    pub recursive: bool,
}

/// Where a trusted proxy puts the client's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealIpSource {
    /// A request field (its name as configured; fields are matched ignoring case).
    Header(String),
    /// The PROXY protocol header: applied per connection, by the listener.
    ProxyProtocol,
}

impl RealIp {
    /// Whether `ip` is one of the trusted proxies of `from`.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.from.iter().any(|c| c.contains(ip))
    }

    /// The request's client address: the one the configured field names (port 0, as
    /// nginx's realip sets it) when `client`, the connection's client, is trusted; else
    /// `client`.
    pub fn resolve(&self, client: SocketAddr, req: &edge_http::RequestHead) -> SocketAddr {
        let RealIpSource::Header(name) = &self.source else {
            return client;
        };
        edge_http::forwarded::real_client(
            client.ip(),
            req.headers.get_all(name),
            |ip| self.trusts(ip),
            self.recursive,
        )
        .map_or(client, |ip| SocketAddr::new(ip, 0))
    }

    /// A connection's client address on a PROXY listener: the header's source, unless
    /// this `real_ip` takes the PROXY header only from trusted peers and `peer` is not
    /// one.
    pub fn proxied(real_ip: Option<&RealIp>, peer: SocketAddr, src: SocketAddr) -> SocketAddr {
        match real_ip {
            Some(r) if r.source == RealIpSource::ProxyProtocol && !r.trusts(peer.ip()) => peer,
            _ => src,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real_ip(header: &str, from: &[&str], recursive: bool) -> RealIp {
        RealIp {
            from: from.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
            source: if header == "proxy_protocol" {
                RealIpSource::ProxyProtocol
            } else {
                RealIpSource::Header(header.into())
            },
            recursive,
        }
    }

    fn req(fields: &str) -> edge_http::RequestHead {
        crate::testutil::parse(&format!("GET / HTTP/1.1\r\nHost: a\r\n{fields}\r\n"))
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_field_from_a_trusted_client_names_the_request_client() {
        let r = real_ip("X-Forwarded-For", &["127.0.0.0/8", "::1"], true);
        let h = req("X-Forwarded-For: 203.0.113.9, 127.0.0.5\r\n");
        assert_eq!(r.resolve(sa("127.0.0.1:4000"), &h), sa("203.0.113.9:0"));
        assert_eq!(r.resolve(sa("[::1]:4000"), &h), sa("203.0.113.9:0"));
        // Untrusted: the connection's client, port and all.
        assert_eq!(r.resolve(sa("192.0.2.1:4000"), &h), sa("192.0.2.1:4000"));
        // Not recursive: the last entry.
        let r = real_ip("x-forwarded-for", &["127.0.0.0/8"], false);
        assert_eq!(r.resolve(sa("127.0.0.1:4000"), &h), sa("127.0.0.5:0"));
        // Another field name; none there.
        let r = real_ip("X-Real-IP", &["127.0.0.0/8"], false);
        assert_eq!(r.resolve(sa("127.0.0.1:4000"), &h), sa("127.0.0.1:4000"));
        let h = req("x-real-ip: 2001:db8::1\r\n");
        assert_eq!(r.resolve(sa("127.0.0.1:4000"), &h), sa("[2001:db8::1]:0"));
    }

    #[test]
    fn the_proxy_protocol_source_may_be_limited_to_trusted_peers() {
        let (peer, src) = (sa("10.1.1.1:5000"), sa("203.0.113.9:6000"));
        assert_eq!(RealIp::proxied(None, peer, src), src);
        let pp = real_ip("proxy_protocol", &["10.0.0.0/8"], false);
        assert_eq!(RealIp::proxied(Some(&pp), peer, src), src);
        assert_eq!(
            RealIp::proxied(Some(&pp), sa("192.0.2.1:1"), src),
            sa("192.0.2.1:1")
        );
        // A field-based real_ip leaves the PROXY source alone, and a request on it
        // keeps the connection's client.
        let xff = real_ip("X-Forwarded-For", &["192.0.2.0/24"], false);
        assert_eq!(RealIp::proxied(Some(&xff), sa("192.0.2.1:1"), src), src);
        assert_eq!(pp.resolve(src, &req("X-Forwarded-For: 1.2.3.4\r\n")), src);
    }
}
