//! The servers under test: edgecache and the peers (nginx, Varnish, Apache Traffic
//! Server), one file per kind.
//!
//! How it fits: a [`ServerKind`] knows its program, its Debian package and how to turn
//! a template from `bench/peers/` plus the experiment's variables into a config in the
//! server's own run directory ([`prepare`]). The runner then starts the returned
//! [`Launch`] as a foreground process on a free loopback port, never as a system
//! service. Every kind adds `X-Cache-Status` (HIT/MISS) where it can, so the runner can
//! check that "hit" cells really hit.

mod ats;
mod edgecache;
mod launch;
mod nginx;
mod varnish;

pub use crate::kind::ServerKind;
pub use launch::{standard_vars, Ctx, Launch};

use std::path::Path;

use crate::error::Result;
use crate::experiment::ServerSpec;

/// Writes the server's config files into `ctx.dir` and returns how to start it.
pub fn prepare(spec: &ServerSpec, ctx: &Ctx) -> Result<Launch> {
    match spec.kind {
        ServerKind::Edgecache => edgecache::prepare(spec, ctx),
        ServerKind::Nginx => nginx::prepare(spec, ctx),
        ServerKind::Varnish => varnish::prepare(spec, ctx),
        ServerKind::Ats => ats::prepare(spec, ctx),
    }
}

/// The program's version line, for the report (None if it will not say).
pub fn version(kind: ServerKind, program: &Path) -> Option<String> {
    let flag = match kind {
        ServerKind::Edgecache => "-V",
        ServerKind::Nginx => "-v",
        ServerKind::Varnish => "-V",
        ServerKind::Ats => "--version",
    };
    let out = std::process::Command::new(program)
        .arg(flag)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.contains("using root directory"))?
        .to_string();
    Some(line.chars().take(120).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::launch::render_to;
    use super::*;
    use std::path::PathBuf;

    /// The repository's `bench/` directory (templates are tested as shipped).
    pub fn bench_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")
    }

    pub fn spec(kind: ServerKind, vars: &[(&str, &str)], config: Option<&str>) -> ServerSpec {
        ServerSpec {
            name: kind.name().into(),
            kind,
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            config: config.map(str::to_string),
            program: None,
            quick: true,
        }
    }

    /// Renders `kind` from the shipped templates into a fresh temp dir (port 4321,
    /// origin 127.0.0.1:5555), as every peer's template test does.
    pub fn render(
        kind: ServerKind,
        vars: &[(&str, &str)],
        config: Option<&str>,
    ) -> (Launch, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let bench = bench_dir();
        let ctx = Ctx {
            bench_dir: &bench,
            dir: dir.path(),
            port: 4321,
            admin_port: 4322,
            origin: "127.0.0.1:5555".parse().unwrap(),
        };
        let launch = prepare(&spec(kind, vars, config), &ctx).unwrap();
        (launch, dir)
    }

    #[test]
    fn kinds_parse_and_name_round_trip() {
        for k in [
            ServerKind::Edgecache,
            ServerKind::Nginx,
            ServerKind::Varnish,
            ServerKind::Ats,
        ] {
            assert_eq!(ServerKind::parse(k.name()).unwrap(), k);
        }
        assert_eq!(ServerKind::parse("TrafficServer").unwrap(), ServerKind::Ats);
        assert!(ServerKind::parse("squid").unwrap_err().contains("squid"));
    }

    #[test]
    fn experiment_vars_override_standard_ones() {
        let dir = tempfile::tempdir().unwrap();
        let bench = tempfile::tempdir().unwrap();
        std::fs::create_dir(bench.path().join("peers")).unwrap();
        std::fs::write(
            bench.path().join("peers/t.conf"),
            "{{port}} {{origin}} {{extra|none}}",
        )
        .unwrap();
        let ctx = Ctx {
            bench_dir: bench.path(),
            dir: dir.path(),
            port: 1234,
            admin_port: 1235,
            origin: "127.0.0.1:99".parse().unwrap(),
        };
        let s = spec(ServerKind::Nginx, &[("extra", "x")], None);
        let p = render_to(&s, &ctx, "t.conf", "sub/out.conf").unwrap();
        assert_eq!(std::fs::read_to_string(p).unwrap(), "1234 127.0.0.1:99 x");
        let e = render_to(&s, &ctx, "missing.conf", "o").unwrap_err();
        assert!(e.msg.contains("missing.conf"), "{}", e.msg);
    }
}
