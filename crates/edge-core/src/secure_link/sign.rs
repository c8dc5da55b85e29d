//! `edgecache sign`: a signed URL made with the verifier's own code, so that what it
//! signs is what a location checks.
//!
//! The URL is a path (`/a/b?x=1`) or an absolute `http://` / `https://` URL. It is
//! turned into the GET request a client would send (the authority as `Host`), parsed
//! by the server's request parser, its path normalized as routing does (`$uri`), and
//! the `include` templates are rendered for it exactly as [`super::Verifier::verify`]
//! renders them. The printed URL is the one given (without an expiry or signature
//! argument it already had), with `expires=..&sig=..` appended to its query. Before it
//! is printed, it is checked as the server would check it.

use super::{Verdict, Verifier};
use crate::vars::{normalize_uri, Client, Ctx, Known, Maps, Routed, Template, Var};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// What to sign.
#[derive(Debug, Clone)]
pub struct SignRequest<'a> {
    /// A path with an optional query, or an absolute http(s) URL.
    pub url: &'a str,
    /// The signing secret's bytes (a trailing newline already stripped).
    pub secret: &'a [u8],
    /// Unix seconds.
    pub expires: u64,
    pub expires_arg: &'a str,
    pub signature_arg: &'a str,
    /// The location's `include` templates (built-in variables only).
    pub include: &'a [String],
    /// The client address, for `$remote_addr` / `$binary_remote_addr`.
    pub remote_addr: Option<IpAddr>,
    /// Request fields (`Name: value`), for `$http_NAME` and `$cookie_NAME`.
    pub headers: &'a [String],
}

/// The URL split into what is printed around the target and the target itself.
struct Parts<'a> {
    /// `scheme://authority`, or empty for a path.
    origin: &'a str,
    https: bool,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

fn split_url(url: &str) -> Result<Parts<'_>, String> {
    if let Some(b) = url.bytes().find(|&b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "{url:?} holds the byte {b:#04x}, which a request target cannot: percent-encode it"
        ));
    }
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let (scheme_len, https) = if lower.starts_with("https://") {
        (8, true)
    } else if lower.starts_with("http://") {
        (7, false)
    } else if url.starts_with('/') {
        (0, false)
    } else {
        return Err(format!(
            "{url:?} is neither a path (/a/b?x=1) nor an http:// or https:// URL"
        ));
    };
    let (origin, authority, rest) = if scheme_len > 0 {
        let after = &url[scheme_len..];
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        if end == 0 {
            return Err(format!("{url:?} has no host"));
        }
        (&url[..scheme_len + end], Some(&after[..end]), &after[end..])
    } else {
        ("", None, url)
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    Ok(Parts {
        origin,
        https,
        authority,
        path,
        query,
        fragment,
    })
}

/// The port of an authority (`host:port`, `[v6]:port`), else the scheme's.
fn port_of(authority: Option<&str>, https: bool) -> u16 {
    let default = if https { 443 } else { 80 };
    let Some(a) = authority else {
        return default;
    };
    match a.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') && !h.is_empty() => p.parse().unwrap_or(default),
        _ => default,
    }
}

/// `--expires`: a duration from `now` in the config's syntax (`1h`, `30m`, `3600`,
/// `1d12h`), or `@SECONDS`, an absolute Unix time (a past one makes a link that is
/// already expired). The expiry in Unix seconds.
pub fn expires_at(spec: &str, now: u64) -> Result<u64, String> {
    if let Some(abs) = spec.strip_prefix('@') {
        return super::parse_expiry(abs).ok_or_else(|| {
            format!(
                "--expires {spec:?}: after '@' comes a Unix time in seconds, such as @1700000000"
            )
        });
    }
    let d = crate::config::units::parse_duration(spec)
        .map_err(|e| format!("--expires {spec:?}: {e} (or @UNIX_SECONDS)"))?;
    now.checked_add(d.as_secs())
        .ok_or_else(|| format!("--expires {spec:?} is too far away"))
}

/// The signed URL.
pub fn sign_url(r: &SignRequest<'_>) -> Result<String, String> {
    let parts = split_url(r.url)?;
    let known = Known::default();
    let mut include = Vec::with_capacity(r.include.len());
    for src in r.include {
        let t = Template::compile(src, &known).map_err(|e| {
            format!("--include {src:?}: {e} (sign knows the built-in variables; pass a [[map]] or [[geo]] value as a literal)")
        })?;
        for v in t.vars() {
            match v {
                Var::RemoteAddr | Var::BinaryRemoteAddr if r.remote_addr.is_none() => {
                    return Err(format!(
                        "--include {src:?} reads the client address: give --remote-addr"
                    ))
                }
                Var::ServerName | Var::Capture(_) | Var::Named(_) => {
                    return Err(format!(
                        "--include {src:?}: $server_name and regex captures have no value outside the server; pass the value as a literal"
                    ))
                }
                _ => {}
            }
        }
        include.push(t);
    }
    if include.is_empty() {
        return Err("--include: at least one template (the default is $uri)".into());
    }
    let verifier = Verifier::new(&[r.secret], r.expires_arg, r.signature_arg, include);

    // The target without any expiry or signature argument it had; `/a?` is `/a`.
    let query = parts
        .query
        .map(|q| super::strip_args(q, r.expires_arg, r.signature_arg))
        .filter(|q| !q.is_empty());
    let mut target = parts.path.to_string();
    if target.is_empty() {
        target.push('/');
    }
    if let Some(q) = &query {
        target.push('?');
        target.push_str(q);
    }
    let head = request_head(&target, parts.authority, r.headers)?;
    let mut routed = Routed::default();
    match normalize_uri(head.path()) {
        Ok(std::borrow::Cow::Owned(u)) => routed.uri = Some(u.into()),
        Ok(_) => {}
        Err(e) => return Err(format!("the server answers 400 to {:?}: {e}", head.path())),
    }
    let client = Client {
        peer: SocketAddr::new(
            r.remote_addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            0,
        ),
        tls: parts.https,
        server_port: port_of(parts.authority, parts.https),
    };
    let maps = Maps::default();
    let ctx = Ctx::new(&head, client, "", &routed, &maps);
    let sig = verifier.sign(&verifier.message(&ctx, r.expires));

    let mut url = String::with_capacity(r.url.len() + 100);
    url.push_str(parts.origin);
    url.push_str(&target);
    url.push(if query.is_some() { '&' } else { '?' });
    url.push_str(&format!(
        "{}={}&{}={sig}",
        r.expires_arg, r.expires, r.signature_arg
    ));
    if let Some(f) = parts.fragment {
        url.push('#');
        url.push_str(f);
    }

    // What the server would decide for the URL just made, at its expiry.
    let signed_target =
        &url[parts.origin.len()..url.len() - parts.fragment.map_or(0, |f| f.len() + 1)];
    let head = request_head(signed_target, parts.authority, r.headers)?;
    let ctx = Ctx::new(&head, client, "", &routed, &maps);
    if verifier.verify(&ctx, r.expires) != Verdict::Valid {
        return Err(format!(
            "internal error: {url} does not verify; please report it"
        ));
    }
    Ok(url)
}

/// The GET request a client sends for `target`, parsed as the server parses it.
fn request_head(
    target: &str,
    authority: Option<&str>,
    headers: &[String],
) -> Result<edge_http::RequestHead, String> {
    let has_host = headers.iter().any(|h| {
        h.split_once(':')
            .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("host"))
    });
    let host = authority.filter(|_| !has_host);
    let version = if host.is_some() || has_host {
        "HTTP/1.1"
    } else {
        "HTTP/1.0"
    };
    let mut raw = format!("GET {target} {version}\r\n");
    if let Some(h) = host {
        raw.push_str(&format!("Host: {h}\r\n"));
    }
    for h in headers {
        if h.bytes().any(|b| b == b'\r' || b == b'\n') {
            return Err(format!(
                "--header {h:?}: one field per flag, no line breaks"
            ));
        }
        raw.push_str(h);
        raw.push_str("\r\n");
    }
    raw.push_str("\r\n");
    match edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default()) {
        Ok(Some((head, _))) if head.target == target => Ok(head),
        Ok(Some((head, _))) => Err(format!(
            "the server would read {:?} as the target, not {target:?}",
            head.target
        )),
        Ok(None) => Err(format!("{target:?}: the request is too long")),
        Err(e) => Err(format!("the server would refuse {target:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(url: &'a str, include: &'a [String]) -> SignRequest<'a> {
        SignRequest {
            url,
            secret: b"k",
            expires: 2_000_000_000,
            expires_arg: "expires",
            signature_arg: "sig",
            include,
            remote_addr: None,
            headers: &[],
        }
    }

    #[test]
    fn appends_the_arguments_and_keeps_the_rest() {
        let inc = ["$uri".to_string()];
        let u = sign_url(&req("/a/b", &inc)).unwrap();
        assert!(u.starts_with("/a/b?expires=2000000000&sig="), "{u}");
        assert_eq!(u.len(), "/a/b?expires=2000000000&sig=".len() + 64);
        let u = sign_url(&req("https://Example.com:8443/a?x=1#top", &inc)).unwrap();
        assert!(
            u.starts_with("https://Example.com:8443/a?x=1&expires=2000000000&sig="),
            "{u}"
        );
        assert!(u.ends_with("#top"));
        // An old signature is replaced, not kept beside the new one.
        let again = sign_url(&req(&u, &inc)).unwrap();
        assert_eq!(again, u);
        // `/a?` is `/a`.
        assert_eq!(
            sign_url(&req("/a?", &inc)).unwrap(),
            sign_url(&req("/a", &inc)).unwrap()
        );
    }

    #[test]
    fn a_url_hiding_a_second_request_line_is_refused() {
        // fuzz/fuzz_targets/secure_link.rs found it: the appended arguments landed in a
        // header line of the head the server would parse, so the link did not verify.
        let url = "/?&@/%\u{fffd}k'//%4\u{fffd}) HTTP/1.0\navvvvvvvvv:vvvvvvvv\u{fffd}k'//%4";
        let e = sign_url(&req(url, &["$uri".to_string()])).unwrap_err();
        assert!(e.contains("percent-encode"), "{e}");
    }

    #[test]
    fn expiry_is_a_duration_from_now_or_an_absolute_time() {
        assert_eq!(expires_at("1h", 1000), Ok(4600));
        assert_eq!(expires_at("1m30s", 1000), Ok(1090));
        assert_eq!(expires_at("60", 1000), Ok(1060));
        assert_eq!(expires_at("@1700000000", 5), Ok(1_700_000_000));
        assert_eq!(expires_at("@0", 5), Ok(0));
        for bad in ["", "1x", "@", "@-1", "@01", "@1.5", "-5"] {
            assert!(expires_at(bad, 1000).is_err(), "{bad}");
        }
        assert!(expires_at("1000w", u64::MAX - 5).is_err());
    }

    #[test]
    fn signs_the_normalized_path() {
        let inc = ["$uri".to_string()];
        let sig = |u: &str| {
            let s = sign_url(&req(u, &inc)).unwrap();
            s[s.len() - 64..].to_string()
        };
        assert_eq!(sig("/a%2Db/./c"), sig("/a-b/c"));
        assert_ne!(sig("/a-b/c"), sig("/a-b/d"));
    }

    #[test]
    fn refuses_what_it_cannot_sign() {
        let inc = ["$uri".to_string()];
        assert!(sign_url(&req("a/b", &inc)).is_err());
        assert!(sign_url(&req("ftp://h/a", &inc)).is_err());
        assert!(sign_url(&req("http:///a", &inc)).is_err());
        assert!(sign_url(&req("/a%00", &inc)).unwrap_err().contains("400"));
        assert!(sign_url(&req("/a b", &inc)).is_err());
        // A line break would put the arguments in another line of the head.
        let smuggled = "/a HTTP/1.0\nx:";
        assert!(sign_url(&req(smuggled, &inc)).unwrap_err().contains("0x20"));
        assert!(sign_url(&req("/a\nx:", &inc)).unwrap_err().contains("0x0a"));
        let ip = ["$uri$remote_addr".to_string()];
        assert!(sign_url(&req("/a", &ip))
            .unwrap_err()
            .contains("--remote-addr"));
        let map = ["$country".to_string()];
        assert!(sign_url(&req("/a", &map)).unwrap_err().contains("unknown"));
        assert!(sign_url(&req("/a", &[])).is_err());
    }
}
