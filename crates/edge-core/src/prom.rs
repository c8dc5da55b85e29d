//! The Prometheus text exposition format (version 0.0.4) that `GET /metrics` answers:
//! one writer, [`Prom`], through which every counter group renders its own families.
//!
//! How it fits: each group of counters writes its families where it is defined
//! (`metrics/families.rs` for a worker's counters, `tls` for handshakes, `limit::zone`
//! for the limit zones, `state::caches` for the cache zones, `upstream::group` for
//! server health, `aio` and `compress` for their pools); `admin` only calls them in
//! turn. This module depends on nothing else in the crate, so any module may use it
//! without an import circle.
//!
//! A family is started once ([`Prom::family`]: its `# HELP` and `# TYPE` lines), then
//! its samples follow, each with its labels. Label values are escaped as the format
//! asks (`\\`, `\"` and `\n`), so a name from the config can never break a line.

use std::fmt::{self, Display, Write};

/// A metric family's type (`# TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A label: its name (an identifier in the code) and its value (escaped on output).
pub type Label<'a> = (&'a str, &'a dyn Display);

/// The `/metrics` text being written.
#[derive(Default)]
pub struct Prom {
    out: String,
    /// The families started so far (debug builds: a second start is a bug).
    #[cfg(debug_assertions)]
    started: std::collections::HashSet<&'static str>,
}

impl Prom {
    pub fn new() -> Prom {
        Prom {
            out: String::with_capacity(16 * 1024),
            ..Prom::default()
        }
    }

    /// The text written.
    pub fn finish(self) -> String {
        self.out
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines. Its samples are written through
    /// the [`Family`] returned.
    pub fn family(&mut self, name: &'static str, kind: Kind, help: &str) -> Family<'_> {
        #[cfg(debug_assertions)]
        debug_assert!(self.started.insert(name), "family {name} started twice");
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.as_str());
        Family {
            out: &mut self.out,
            name,
        }
    }

    /// [`Prom::family`] for a counter.
    pub fn counter(&mut self, name: &'static str, help: &str) -> Family<'_> {
        self.family(name, Kind::Counter, help)
    }

    /// [`Prom::family`] for a gauge.
    pub fn gauge(&mut self, name: &'static str, help: &str) -> Family<'_> {
        self.family(name, Kind::Gauge, help)
    }
}

/// The samples of one family, written after its header.
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl Family<'_> {
    /// The family's one sample, without labels.
    pub fn value(&mut self, v: u64) -> &mut Self {
        self.sample("", &[], v)
    }

    /// One labelled sample: `name{a="x",b="y"} v`.
    pub fn labelled(&mut self, labels: &[Label<'_>], v: u64) -> &mut Self {
        self.sample("", labels, v)
    }

    /// One sample of a series named with a suffix of the family's name (a histogram's
    /// `_bucket` and `_count`).
    pub fn sample(&mut self, suffix: &str, labels: &[Label<'_>], v: u64) -> &mut Self {
        self.out.push_str(self.name);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(name);
                self.out.push_str("=\"");
                let _ = write!(Escaped(self.out), "{value}");
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {v}");
        self
    }
}

/// Writes a label value escaped: backslash, double quote and line feed.
struct Escaped<'a>(&'a mut String);

impl Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '\\' => self.0.push_str("\\\\"),
                '"' => self.0.push_str("\\\""),
                '\n' => self.0.push_str("\\n"),
                c => self.0.push(c),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escaping() {
        let mut p = Prom::new();
        p.counter("a_total", "Things, by kind.")
            .labelled(&[("kind", &"x")], 1)
            .labelled(&[("kind", &"y"), ("worker", &3)], 2);
        p.gauge("b", "One.\nTwo \\ three.").value(7);
        p.family("h_seconds", Kind::Histogram, "Latency.")
            .sample("_bucket", &[("le", &0.000001f64)], 1)
            .sample("_bucket", &[("le", &"+Inf")], 2)
            .sample("_count", &[], 2);
        p.gauge("c", "Odd names.")
            .labelled(&[("name", &"a\"b\\c\nd")], 0);
        assert_eq!(
            p.finish(),
            "# HELP a_total Things, by kind.\n# TYPE a_total counter\n\
             a_total{kind=\"x\"} 1\na_total{kind=\"y\",worker=\"3\"} 2\n\
             # HELP b One.\\nTwo \\\\ three.\n# TYPE b gauge\nb 7\n\
             # HELP h_seconds Latency.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{le=\"0.000001\"} 1\nh_seconds_bucket{le=\"+Inf\"} 2\n\
             h_seconds_count 2\n\
             # HELP c Odd names.\n# TYPE c gauge\nc{name=\"a\\\"b\\\\c\\nd\"} 0\n"
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "started twice")]
    fn a_family_starts_once() {
        let mut p = Prom::new();
        p.counter("a_total", "A.");
        p.counter("a_total", "A.");
    }
}
