//! Command-line flags (wrk-compatible, plus edgeload's additions) and their validation
//! into a [`Config`].
//!
//! How it fits: `main` calls [`parse`]; every usage problem comes back as
//! [`CliError::Usage`] and becomes exit code 2 with one clear line on stderr, before any
//! thread or socket exists. The rest of the program only ever sees a valid [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::mix::{build_classes, MAX_MIX_BYTES, MAX_PATHS, MAX_ZIPF};
use crate::source::Sources;
use crate::target::{check_header, Class, Ids, Scheme, Seek, Url};
use crate::tls::{TlsClient, TlsOptions, Verify};

/// Most requests a connection keeps in flight with `--pipeline`.
pub const MAX_PIPELINE: usize = 256;
/// Most threads and connections (a sanity bound, not a tuning value).
pub const MAX_THREADS: usize = 1024;
pub const MAX_CONNECTIONS: usize = 1_000_000;
/// Most `-H` headers.
pub use crate::target::MAX_HEADERS;

#[derive(Parser, Debug)]
#[command(
    name = "edgeload",
    version,
    about = "wrk-class HTTP/1.1, HTTPS and HTTP/3 load generator: closed or open loop (-R), connection ramp, URL mixes, body verification",
    after_help = "Durations: 10s, 1m, 500ms, 1h, or a plain number of seconds."
)]
pub struct Args {
    /// Number of threads (each runs its own event loop).
    #[arg(short = 't', long = "threads", default_value_t = 2)]
    pub threads: usize,
    /// Connections to keep open, split evenly over the threads.
    #[arg(short = 'c', long = "connections", default_value_t = 10)]
    pub connections: usize,
    /// Duration of the test.
    #[arg(short = 'd', long = "duration", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Open loop: total requests per second, latency corrected for coordinated omission.
    #[arg(short = 'R', long = "rate")]
    pub rate: Option<f64>,
    /// Open connections at this many per second and report Connect and Delay.
    #[arg(long = "ramp", value_name = "CONN_PER_S")]
    pub ramp: Option<f64>,
    /// File of "WEIGHT URL" lines; each request picks one by weight.
    #[arg(long = "mix", value_name = "FILE")]
    pub mix: Option<PathBuf>,
    /// Spread requests over <URL path>/1..N (per mix line with --mix).
    #[arg(long = "paths", value_name = "N")]
    pub paths: Option<u64>,
    /// With --paths: draw the number with Zipf(ALPHA) popularity (0 < ALPHA <= 3), 1 the
    /// most popular; without it, uniformly.
    #[arg(long = "zipf", value_name = "ALPHA")]
    pub zipf: Option<f64>,
    /// With --paths: take the numbers in order, 1, 2, ..., N, then 1 again, shared by
    /// every connection (a cache fill: with --requests N each id is asked once).
    #[arg(long = "sequential", conflicts_with = "zipf")]
    pub sequential: bool,
    /// A new connection per request (sends Connection: close).
    #[arg(long = "no-keepalive")]
    pub no_keepalive: bool,
    /// Requests in flight per connection.
    #[arg(long = "pipeline", value_name = "N", default_value_t = 1)]
    pub pipeline: usize,
    /// Seeking player: each connection picks an object (the number from --paths) and an
    /// offset uniform over 0..=SPAN-READ, then reads READ bytes in STEP-byte
    /// `Range: bytes=a-b` requests, one after another; then seeks again.
    #[arg(
        long = "seek",
        value_name = "SPAN,READ,STEP",
        conflicts_with = "verify"
    )]
    pub seek: Option<String>,
    /// Check each body against its X-Checksum header (xxh3-64).
    #[arg(long = "verify")]
    pub verify: bool,
    /// Read every body byte into the client's buffer, as wrk does. By default, over plain
    /// HTTP/1.1 and without --verify, body bytes past the read buffer are dropped in the
    /// kernel unread (`recv(MSG_TRUNC)`: no copy), so the client's CPU goes to requests,
    /// not to copying bodies, and a server of large objects is the bottleneck.
    #[arg(long = "copy-bodies")]
    pub copy_bodies: bool,
    /// Print the latency distribution.
    #[arg(short = 'L', long = "latency")]
    pub latency: bool,
    /// Print a log2 ASCII histogram of latency in ms.
    #[arg(long = "histogram")]
    pub histogram: bool,
    /// Write counts, errors, rates and percentiles as JSON to FILE.
    #[arg(long = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Socket/request timeout.
    #[arg(short = 'T', long = "timeout", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Add a header to every request ("Name: value"); repeatable.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Stop after this many requests have been sent and answered.
    #[arg(long = "requests", value_name = "N")]
    pub requests: Option<u64>,
    /// https: accept any server certificate (handshake signatures are still checked).
    #[arg(short = 'k', long = "insecure", conflicts_with = "cacert")]
    pub insecure: bool,
    /// https: trust the CA certificates in this PEM file instead of the system's.
    #[arg(long = "cacert", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// https: no session resumption, every connection makes a full handshake.
    #[arg(long = "tls-no-resume")]
    pub tls_no_resume: bool,
    /// HTTP/3 over QUIC (an https:// URL): each connection is a QUIC connection of its own
    /// UDP socket, with --pipeline N concurrent request streams on it.
    #[arg(long = "h3")]
    pub h3: bool,
    /// Bind client sockets round robin to these local addresses before connecting:
    /// A-B (an IPv4 range), A, or a comma list (127.0.0.2-127.0.0.254: 253 clients).
    #[arg(long = "source", value_name = "ADDRS")]
    pub source: Option<String>,
    /// http://host[:port]/path or https://host[:port]/path
    pub url: String,
}

/// Parses `10s`, `1m`, `500ms`, `250us`, `1h`, `1.5s`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}' (try 10s, 1m, 500ms)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in '{s}' (use us, ms, s, m or h)"
            ))
        }
    };
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(format!("duration '{s}' must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Open-loop settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenLoop {
    /// Requests per second over all connections.
    pub rate: f64,
}

/// A validated run configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub threads: usize,
    pub connections: usize,
    pub duration: Duration,
    pub open_loop: Option<OpenLoop>,
    pub ramp: Option<f64>,
    pub keepalive: bool,
    pub pipeline: usize,
    pub verify: bool,
    /// `--copy-bodies`: never drop body bytes unread.
    pub copy_bodies: bool,
    pub latency: bool,
    pub histogram: bool,
    pub json: Option<PathBuf>,
    pub timeout: Duration,
    pub requests: Option<u64>,
    pub url: Url,
    pub addr: SocketAddr,
    /// `https://`: the TLS settings every connection shares (one rustls config, so one
    /// session cache). With `--h3`, the QUIC connections' (TLS 1.3, ALPN `h3`).
    pub tls: Option<TlsClient>,
    /// `--h3`: HTTP/3 over QUIC ([`crate::h3`]) instead of HTTP/1.1 over TCP.
    pub h3: bool,
    pub classes: Vec<Class>,
    /// `--paths N`.
    pub paths: Option<u64>,
    /// `--zipf ALPHA`: ids drawn with Zipf popularity instead of uniformly.
    pub zipf: Option<f64>,
    /// `--sequential`: ids taken in order.
    pub sequential: bool,
    /// `--seek`: ranges read the way a seeking player reads them.
    pub seek: Option<Seek>,
    /// True when `--mix` or `--paths` was given (the report adds a class table).
    pub show_classes: bool,
    /// `--source`: the local addresses sockets are bound to, round robin.
    pub source: Option<Sources>,
}

/// Why the command line was refused.
#[derive(Debug)]
pub enum CliError {
    /// `--help` or `--version`: clap prints it, exit 0.
    Info(clap::Error),
    /// Bad flags or values: exit 2.
    Usage(String),
    /// The flags are fine but the host does not resolve: exit 1.
    Runtime(String),
}

/// Parses and validates the command line.
pub fn parse<I, T>(argv: I) -> Result<Config, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if e.use_stderr() => return Err(CliError::Usage(e.to_string())),
        Err(e) => return Err(CliError::Info(e)),
    };
    let usage = |m: String| CliError::Usage(m);
    if args.threads == 0 || args.threads > MAX_THREADS {
        return Err(usage(format!("-t must be between 1 and {MAX_THREADS}")));
    }
    if args.connections == 0 || args.connections > MAX_CONNECTIONS {
        return Err(usage(format!("-c must be between 1 and {MAX_CONNECTIONS}")));
    }
    if args.connections < args.threads {
        return Err(usage(format!(
            "number of connections (-c {}) must be >= threads (-t {})",
            args.connections, args.threads
        )));
    }
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(usage(format!("-R must be a positive rate, got {r}")));
        }
    }
    if let Some(r) = args.ramp {
        if !(r.is_finite() && r > 0.0) {
            return Err(usage(format!(
                "--ramp must be a positive number of connections per second, got {r}"
            )));
        }
    }
    if args.pipeline == 0 || args.pipeline > MAX_PIPELINE {
        return Err(usage(format!(
            "--pipeline must be between 1 and {MAX_PIPELINE}"
        )));
    }
    if args.no_keepalive && args.pipeline > 1 {
        return Err(usage(
            "--pipeline needs keep-alive connections; drop --no-keepalive".into(),
        ));
    }
    if let Some(n) = args.paths {
        if n == 0 || n > MAX_PATHS {
            return Err(usage(format!("--paths must be between 1 and {MAX_PATHS}")));
        }
    }
    if let Some(a) = args.zipf {
        if args.paths.is_none() {
            return Err(usage(
                "--zipf needs --paths N (the ids 1..N it draws from)".into(),
            ));
        }
        if !(a.is_finite() && a > 0.0 && a <= MAX_ZIPF) {
            return Err(usage(format!(
                "--zipf must be an exponent in (0, {MAX_ZIPF}], got {a}"
            )));
        }
    }
    if args.sequential && args.paths.is_none() {
        return Err(usage(
            "--sequential needs --paths N (the ids 1..N it takes in order)".into(),
        ));
    }
    let seek = match &args.seek {
        None => None,
        Some(_) if args.paths.is_none() => {
            return Err(usage(
                "--seek needs --paths N (the objects 1..N it seeks in)".into(),
            ))
        }
        Some(s) => Some(Seek::parse(s).map_err(usage)?),
    };
    if args.requests == Some(0) {
        return Err(usage("--requests must be at least 1".into()));
    }
    if args.headers.len() > MAX_HEADERS {
        return Err(usage(format!("at most {MAX_HEADERS} -H headers")));
    }
    let headers = args
        .headers
        .iter()
        .map(|h| check_header(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    let url = Url::parse(&args.url).map_err(|e| usage(format!("invalid URL {e}")))?;
    if args.h3 {
        if url.scheme != Scheme::Https {
            return Err(usage(
                "--h3 needs an https:// URL (HTTP/3 always runs over TLS)".into(),
            ));
        }
        crate::h3req::check_headers(&headers).map_err(usage)?;
    }
    let tls = match url.scheme {
        Scheme::Http => {
            if args.insecure || args.cacert.is_some() || args.tls_no_resume {
                return Err(usage(
                    "--insecure, --cacert and --tls-no-resume need an https:// URL".into(),
                ));
            }
            None
        }
        Scheme::Https => {
            let verify = match (&args.cacert, args.insecure) {
                (_, true) => Verify::Off,
                (Some(p), false) => Verify::CaFile(p.clone()),
                (None, false) => Verify::System,
            };
            let options = TlsOptions {
                verify,
                resume: !args.tls_no_resume,
            };
            if args.h3 {
                let client = TlsClient::new_h3(&url.host, options).map_err(usage)?;
                // Refuse here what quinn would refuse on every connection.
                crate::h3req::quic_client_config(&client, Default::default()).map_err(usage)?;
                Some(client)
            } else {
                Some(TlsClient::new(&url.host, options).map_err(usage)?)
            }
        }
    };
    let mix_text = match &args.mix {
        None => None,
        Some(p) => Some((p.display().to_string(), read_mix(p).map_err(usage)?)),
    };
    let classes = build_classes(
        &url,
        mix_text.as_ref().map(|(n, t)| (n.as_str(), t.as_str())),
        args.paths.map(|n| {
            if args.sequential {
                Ids::sequential(n)
            } else {
                Ids::new(n, args.zipf)
            }
        }),
        &headers,
        args.no_keepalive,
    )
    .map_err(usage)?;
    if args.h3 {
        crate::h3req::check_classes(&classes, &url.authority).map_err(usage)?;
    }
    let source = match &args.source {
        None => None,
        Some(spec) => Some(crate::source::parse(spec).map_err(usage)?),
    };
    let addr = match &source {
        None => url.resolve(),
        Some(s) => url.resolve_family(s.is_ipv4()),
    }
    .map_err(CliError::Runtime)?;
    if let Some(s) = &source {
        s.check_bindable().map_err(CliError::Runtime)?;
    }
    Ok(Config {
        threads: args.threads,
        connections: args.connections,
        duration: args.duration,
        open_loop: args.rate.map(|rate| OpenLoop { rate }),
        ramp: args.ramp,
        keepalive: !args.no_keepalive,
        pipeline: args.pipeline,
        verify: args.verify,
        copy_bodies: args.copy_bodies,
        latency: args.latency,
        histogram: args.histogram,
        json: args.json,
        timeout: args.timeout,
        requests: args.requests,
        show_classes: args.mix.is_some() || args.paths.is_some(),
        paths: args.paths,
        zipf: args.zipf,
        sequential: args.sequential,
        seek,
        url,
        addr,
        tls,
        h3: args.h3,
        classes,
        source,
    })
}

fn read_mix(p: &std::path::Path) -> Result<String, String> {
    let meta = std::fs::metadata(p).map_err(|e| format!("--mix {}: {e}", p.display()))?;
    if meta.len() > MAX_MIX_BYTES {
        return Err(format!(
            "--mix {}: larger than {MAX_MIX_BYTES} bytes",
            p.display()
        ));
    }
    std::fs::read_to_string(p).map_err(|e| format!("--mix {}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_err(args: &[&str]) -> String {
        let argv = std::iter::once("edgeload").chain(args.iter().copied());
        match parse(argv) {
            Err(CliError::Usage(m)) => m,
            Err(e) => panic!("{args:?}: not a usage error: {e:?}"),
            Ok(_) => panic!("{args:?}: accepted"),
        }
    }

    #[test]
    fn durations_like_wrk() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        for bad in ["", "s", "10x", "-1s", "0", "1e3s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(["edgeload", "http://127.0.0.1:1/x"]).unwrap();
        assert_eq!(
            (c.threads, c.connections, c.duration),
            (2, 10, Duration::from_secs(10))
        );
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert!(c.keepalive && c.open_loop.is_none() && !c.show_classes);
        let c = parse([
            "edgeload",
            "-t1",
            "-c",
            "4",
            "-d",
            "2s",
            "-R",
            "500",
            "--ramp",
            "100",
            "--paths",
            "10",
            "-H",
            "X-A: 1",
            "--latency",
            "--timeout",
            "500ms",
            "--requests",
            "7",
            "http://127.0.0.1:1/obj",
        ])
        .unwrap();
        assert_eq!(c.open_loop, Some(OpenLoop { rate: 500.0 }));
        assert_eq!(
            (c.ramp, c.requests, c.classes[0].name.as_str()),
            (Some(100.0), Some(7), "/obj/*")
        );
        assert!(c.show_classes && c.latency);
        assert_eq!((c.paths, c.zipf), (Some(10), None));
        let c = parse([
            "edgeload",
            "--paths",
            "20000",
            "--zipf",
            "0.8",
            "http://127.0.0.1:1/obj/10k",
        ])
        .unwrap();
        assert_eq!((c.paths, c.zipf), (Some(20000), Some(0.8)));
        assert_eq!(c.classes[0].name, "/obj/10k/*");
    }

    #[test]
    fn https_flags() {
        let c = parse(["edgeload", "http://127.0.0.1:1/"]).unwrap();
        assert!(c.tls.is_none());
        let c = parse(["edgeload", "-k", "https://127.0.0.1:1/x"]).unwrap();
        let t = c.tls.expect("https gets a TLS client");
        assert_eq!((t.options.verify, t.options.resume), (Verify::Off, true));
        assert_eq!((c.url.port, c.addr.port()), (1, 1));
        let c = parse([
            "edgeload",
            "--insecure",
            "--tls-no-resume",
            "https://127.0.0.1/",
        ])
        .unwrap();
        assert_eq!(c.addr.port(), 443, "https defaults to port 443");
        assert!(!c.tls.unwrap().options.resume);
    }

    #[test]
    fn h3_flags() {
        let c = parse(["edgeload", "http://127.0.0.1:1/"]).unwrap();
        assert!(!c.h3);
        let c = parse([
            "edgeload",
            "--h3",
            "-k",
            "--pipeline",
            "16",
            "-R",
            "100",
            "--paths",
            "5",
            "-H",
            "TE: trailers",
            "https://127.0.0.1:1/x",
        ])
        .unwrap();
        assert!(c.h3);
        assert_eq!(c.pipeline, 16);
        let t = c.tls.expect("--h3 gets a TLS client");
        assert_eq!(t.config.alpn_protocols, vec![b"h3".to_vec()]);
        assert_eq!((t.options.verify, t.options.resume), (Verify::Off, true));
        assert!(t.verifier.is_some());
        // A new QUIC connection per request, and no resumption, are fine too.
        let c = parse([
            "edgeload",
            "--h3",
            "--insecure",
            "--no-keepalive",
            "--tls-no-resume",
            "https://[::1]:8443/",
        ])
        .unwrap();
        assert!(c.h3 && !c.keepalive && !c.tls.unwrap().options.resume);
    }

    #[test]
    fn h3_usage_errors() {
        let u = "https://127.0.0.1:1/";
        for url in ["http://127.0.0.1:1/", "http://localhost/x"] {
            assert!(
                usage_err(&["--h3", url]).contains("--h3 needs an https:// URL"),
                "{url}"
            );
        }
        assert!(
            usage_err(&["--h3", "-k", "http://127.0.0.1:1/"]).contains("--h3 needs an https://")
        );
        for h in [
            "Connection: close",
            "Keep-Alive: 5",
            "Transfer-Encoding: chunked",
            "Upgrade: websocket",
        ] {
            let e = usage_err(&["--h3", "-k", "-H", h, u]);
            assert!(e.contains("not allowed in HTTP/3"), "{h}: {e}");
        }
        assert!(usage_err(&["--h3", "-k", "-H", "TE: gzip", u]).contains("TE: trailers"));
        // The same -H is fine over HTTP/1.1.
        parse(["edgeload", "-k", "-H", "Connection: keep-alive", u]).unwrap();
        assert!(
            usage_err(&["--h3", "--cacert", "/no/such.pem", u]).contains("--cacert /no/such.pem")
        );
        assert!(usage_err(&["--h3", "-k", "--cacert", "/x.pem", u]).contains("cannot be used with"));
        assert!(usage_err(&["--h3", "-k", "--pipeline", "0", u]).contains("--pipeline"));
        assert!(
            usage_err(&["--h3", "-k", "--pipeline", "2", "--no-keepalive", u])
                .contains("keep-alive")
        );
        assert!(usage_err(&["--h3", "-k", "https://bad_host!/"]).contains("neither a DNS name"));
    }

    #[test]
    fn source_flag() {
        let c = parse(["edgeload", "http://127.0.0.1:1/"]).unwrap();
        assert!(c.source.is_none());
        let c = parse([
            "edgeload",
            "--source",
            "127.0.0.2-127.0.0.4,127.0.0.9",
            "http://127.0.0.1:1/",
        ])
        .unwrap();
        let s = c.source.unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s.spec, "127.0.0.2-127.0.0.4,127.0.0.9");
        assert!(usage_err(&["--source", "nope", "http://127.0.0.1:1/"]).contains("--source nope"));
        // The target in the other family, or an address this host lacks: exit 1.
        for (src, want) in [
            ("::1", "no IPv6 address"),
            ("192.0.2.1", "--source 192.0.2.1: cannot bind"),
        ] {
            match parse(["edgeload", "--source", src, "http://127.0.0.1:1/"]) {
                Err(CliError::Runtime(m)) => assert!(m.contains(want), "{src}: {m}"),
                other => panic!("{src}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        let u = "http://127.0.0.1:1/";
        assert!(usage_err(&["-t", "4", "-c", "2", u]).contains("must be >= threads"));
        assert!(usage_err(&["-d", "10x", u]).contains("invalid duration"));
        assert!(usage_err(&["-R", "0", u]).contains("-R must be a positive"));
        assert!(usage_err(&["--pipeline", "0", u]).contains("--pipeline"));
        assert!(usage_err(&["--pipeline", "2", "--no-keepalive", u]).contains("keep-alive"));
        assert!(usage_err(&["-H", "bad", u]).contains("Name: value"));
        assert!(usage_err(&["ftp://127.0.0.1/"]).contains("must start with http://"));
        for tls_flag in ["-k", "--insecure", "--tls-no-resume"] {
            assert!(usage_err(&[tls_flag, u]).contains("need an https:// URL"));
        }
        assert!(usage_err(&["--cacert", "/x.pem", u]).contains("need an https:// URL"));
        assert!(
            usage_err(&["-k", "--cacert", "/x.pem", "https://127.0.0.1/"])
                .contains("cannot be used with")
        );
        assert!(
            usage_err(&["--cacert", "/no/such.pem", "https://127.0.0.1/"])
                .contains("--cacert /no/such.pem")
        );
        assert!(usage_err(&["--mix", "/nonexistent/mix", u]).contains("--mix /nonexistent/mix"));
        assert!(usage_err(&["--bogus", u]).contains("--bogus"));
        assert!(usage_err(&["--zipf", "1", u]).contains("--zipf needs --paths"));
        assert!(usage_err(&["--sequential", u]).contains("--sequential needs --paths"));
        assert!(usage_err(&["--seek", "8m,4m,1m", u]).contains("--seek needs --paths"));
        assert!(usage_err(&["--paths", "2", "--seek", "1m,4m,1m", u]).contains("STEP <= READ"));
        assert!(
            usage_err(&["--paths", "2", "--seek", "8m,4m,1m", "--verify", u])
                .contains("cannot be used with")
        );
        let c = parse(["edgeload", "--paths", "2", "--seek", "8m,4m,1m", u]).unwrap();
        assert_eq!(
            c.seek.map(|s| (s.span, s.read, s.step)),
            Some((8 << 20, 4 << 20, 1 << 20))
        );
        assert!(usage_err(&["--paths", "9", "--sequential", "--zipf", "1", u]).contains("--zipf"));
        for bad in [
            "--zipf=0",
            "--zipf=-1",
            "--zipf=3.5",
            "--zipf=NaN",
            "--zipf=inf",
        ] {
            let e = usage_err(&["--paths", "10", bad, u]);
            assert!(
                e.contains("--zipf must be an exponent in (0, 3]"),
                "{bad}: {e}"
            );
        }
        assert!(usage_err(&["--paths", "10", "--zipf", "x", u]).contains("--zipf"));
        assert!(usage_err(&[]).contains("URL"));
    }
}
