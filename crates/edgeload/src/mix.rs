//! Request mixes: `--mix FILE` (weighted URL lines), `--paths N` (with `--zipf ALPHA`),
//! the weighted picker and the small PRNG that drives it.
//!
//! How it fits: [`build_classes`] runs once at startup and yields the [`Class`]es that
//! every connection shares; [`Picker`] chooses one per request with a [`SplitMix64`]
//! owned by the connection (no locks, no allocation, one multiply-shift and a binary
//! search over at most [`MAX_MIX_LINES`] weights). The id a class appends under
//! `--paths` is drawn by its [`Ids`] with the same connection-owned generator.

use crate::target::{Class, Ids, Url};

/// Most lines a mix file may have (each is a class with its own histograms).
pub const MAX_MIX_LINES: usize = 256;
/// Largest mix file read.
pub const MAX_MIX_BYTES: u64 = 1 << 20;
/// Largest `--paths` value (the number is generated per request, nothing is stored).
pub const MAX_PATHS: u64 = 1 << 40;
/// Largest `--zipf` exponent (beyond it nearly every request is id 1).
pub const MAX_ZIPF: f64 = 3.0;
/// Weights are fixed point with this many steps per unit, so `0.5` is a valid weight.
const WEIGHT_SCALE: f64 = 1000.0;

/// SplitMix64 (from `edge-rand`, shared with edgeorigin): tiny, fast, statistically fine
/// for picking URLs (not for crypto). Each connection owns one.
pub use edge_rand::SplitMix64;

/// Weighted choice over classes: cumulative weights and a binary search.
#[derive(Debug, Clone)]
pub struct Picker {
    cumulative: Vec<u64>,
    total: u64,
}

impl Picker {
    pub fn new(classes: &[Class]) -> Picker {
        let mut total = 0u64;
        let cumulative = classes
            .iter()
            .map(|c| {
                total = total.saturating_add(c.weight);
                total
            })
            .collect();
        Picker { cumulative, total }
    }

    /// Index of the class for a random number `r`.
    #[inline]
    pub fn pick(&self, r: u64) -> usize {
        if self.cumulative.len() <= 1 {
            return 0;
        }
        // Multiply-shift maps r onto [0, total) without modulo bias worth caring about.
        let x = ((r as u128 * self.total as u128) >> 64) as u64;
        self.cumulative.partition_point(|&c| c <= x)
    }
}

/// Builds the URL classes from the main URL, an optional mix file's text and `--paths`
/// (`ids`: how each class's path number is drawn, the same for every line).
/// `mix` is `(file name, contents)`; errors name the file and line.
pub fn build_classes(
    url: &Url,
    mix: Option<(&str, &str)>,
    ids: Option<Ids>,
    headers: &[String],
    close: bool,
) -> Result<Vec<Class>, String> {
    let lines = match mix {
        None => vec![(1000u64, url.path.clone())],
        Some((name, text)) => parse_mix(name, text, url)?,
    };
    Ok(lines
        .into_iter()
        .map(|(w, path)| Class::new(&path, w, &url.authority, headers, close, ids.clone()))
        .collect())
}

/// Parses mix lines `WEIGHT URL` (`#` comments and blank lines allowed). A URL is a path
/// (`/obj/10k/1`) or a full URL with the main URL's scheme, host and port (one run
/// speaks either plain HTTP or HTTPS to one server).
pub fn parse_mix(name: &str, text: &str, url: &Url) -> Result<Vec<(u64, String)>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |m: String| format!("{name}:{}: {m}", i + 1);
        let mut parts = line.split_whitespace();
        let (Some(w), Some(u), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(at(format!("expected 'WEIGHT URL', got '{line}'")));
        };
        let weight: f64 = w
            .parse()
            .map_err(|_| at(format!("weight '{w}' is not a number")))?;
        if !(weight.is_finite() && weight > 0.0 && weight <= 1e12) {
            return Err(at(format!("weight '{w}' must be a positive number")));
        }
        let weight = ((weight * WEIGHT_SCALE).round() as u64).max(1);
        let path = if u.starts_with('/') {
            Url::parse(&format!("http://{}{u}", url.authority))
                .map_err(|e| at(e.0))?
                .path
        } else {
            let other = Url::parse(u).map_err(|e| at(e.0))?;
            if other.scheme != url.scheme {
                return Err(at(format!(
                    "'{u}' is {}://, but every URL must use the main URL's scheme {}:// \
                     (mixing http and https in one run is not supported)",
                    other.scheme.as_str(),
                    url.scheme.as_str()
                )));
            }
            if other.host != url.host || other.port != url.port {
                return Err(at(format!(
                    "'{u}' is on {}:{}, but every URL must use the main URL's host and port {}:{}",
                    other.host, other.port, url.host, url.port
                )));
            }
            other.path
        };
        if out.len() == MAX_MIX_LINES {
            return Err(at(format!("more than {MAX_MIX_LINES} lines")));
        }
        out.push((weight, path));
    }
    if out.is_empty() {
        return Err(format!("{name}: no 'WEIGHT URL' lines"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> Url {
        Url::parse("http://127.0.0.1:8080/").unwrap()
    }

    #[test]
    fn parses_mix_files() {
        let text = "# the report's mix\n70 /obj/10k/1\n\n20 http://127.0.0.1:8080/obj/100k/1 # c\n0.5 /obj/1m/1\n";
        let m = parse_mix("m.txt", text, &url()).unwrap();
        assert_eq!(
            m,
            vec![
                (70_000, "/obj/10k/1".into()),
                (20_000, "/obj/100k/1".into()),
                (500, "/obj/1m/1".into())
            ]
        );
    }

    #[test]
    fn mix_errors_name_file_and_line() {
        for (text, want) in [
            ("x /a", "m:1: weight 'x' is not a number"),
            ("1 /a\n-1 /b", "m:2: weight '-1' must be a positive"),
            ("1", "m:1: expected 'WEIGHT URL'"),
            ("1 /a b", "m:1: expected 'WEIGHT URL'"),
            (
                "1 http://other:8080/a",
                "m:1: 'http://other:8080/a' is on other:8080",
            ),
            (
                "1 https://127.0.0.1:8080/",
                "m:1: 'https://127.0.0.1:8080/' is https://, but every URL must use the main URL's scheme http://",
            ),
            ("1 ftp://127.0.0.1:8080/", "m:1: 'ftp://127.0.0.1:8080/': the URL must start"),
            ("# nothing", "m: no 'WEIGHT URL' lines"),
        ] {
            let e = parse_mix("m", text, &url()).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn https_mix_lines_follow_the_main_url() {
        let main = Url::parse("https://127.0.0.1:8443/").unwrap();
        let m = parse_mix("m", "1 /a\n2 https://127.0.0.1:8443/b\n", &main).unwrap();
        assert_eq!(m, vec![(1000, "/a".into()), (2000, "/b".into())]);
        let e = parse_mix("m", "1 http://127.0.0.1:8443/b", &main).unwrap_err();
        assert!(e.contains("scheme https://"), "{e}");
        // Default ports follow the scheme: https://h/ is port 443.
        let main = Url::parse("https://h/").unwrap();
        assert!(parse_mix("m", "1 https://h:443/x", &main).is_ok());
    }

    #[test]
    fn picker_follows_weights() {
        let u = url();
        let classes = build_classes(&u, Some(("m", "3 /a\n1 /b")), None, &[], false).unwrap();
        let p = Picker::new(&classes);
        let mut rng = SplitMix64::new(42);
        let mut counts = [0u32; 2];
        for _ in 0..40_000 {
            counts[p.pick(rng.next_u64())] += 1;
        }
        let share = counts[0] as f64 / 40_000.0;
        assert!((0.73..0.77).contains(&share), "{counts:?}");
        assert_eq!(p.pick(0), 0);
        assert_eq!(p.pick(u64::MAX), 1);
    }

    #[test]
    fn single_class_is_the_url() {
        let u = Url::parse("http://h/obj/10k").unwrap();
        let c = build_classes(&u, None, Some(Ids::new(1000, None)), &[], false).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "/obj/10k/*");
        assert_eq!(Picker::new(&c).pick(12345), 0);
    }
}
