//! Apache Traffic Server, from the files in `bench/peers/ats/`.
//!
//! How it fits: `traffic_server` (not the `traffic_manager` supervisor) runs in the
//! foreground with `--run-root`, a generated `runroot.yaml` that moves its config
//! (`etc/`), cache, logs and runtime state into the run dir. The config (ATS 9.x
//! `records.config`) uses one net thread with autoconfig off, a RAM cache of the same
//! size as Varnish's malloc storage, and a remap rule to the origin that loads
//! `header_rewrite` to add `X-Cache-Status`.

use std::time::Duration;

use super::launch::{render_to, Ctx, Launch};
use crate::error::{Context, Result};
use crate::experiment::ServerSpec;

/// Template files copied (rendered) into `<dir>/etc/`.
const CONFIG_FILES: [&str; 7] = [
    "records.config",
    "remap.config",
    "cache_status.config",
    "storage.config",
    "ip_allow.yaml",
    "plugin.config",
    "logging.yaml",
];

/// Directories the runroot layout names.
const DIRS: [&str; 5] = ["cache", "log", "run", "var", "share"];

pub fn prepare(spec: &ServerSpec, ctx: &Ctx) -> Result<Launch> {
    for d in DIRS {
        let p = ctx.dir.join(d);
        std::fs::create_dir_all(&p).ctx(format!("creating {}", p.display()))?;
    }
    for f in CONFIG_FILES {
        render_to(spec, ctx, &format!("ats/{f}"), &format!("etc/{f}"))?;
    }
    let runroot = render_to(spec, ctx, "ats/runroot.yaml", "runroot.yaml")?;
    Ok(Launch {
        args: vec![format!("--run-root={}", runroot.display())],
        env: vec![],
        ready_timeout: Duration::from_secs(30),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::render;
    use super::super::ServerKind;
    use super::*;

    #[test]
    fn renders_a_complete_config_dir() {
        let (l, dir) = render(ServerKind::Ats, &[], None);
        assert!(l.args[0].starts_with("--run-root="));
        let records = std::fs::read_to_string(dir.path().join("etc/records.config")).unwrap();
        assert!(records.contains("server_ports STRING 4321"), "{records}");
        assert!(records.contains("exec_thread.limit INT 1"), "{records}");
        assert!(
            records.contains("exec_thread.autoconfig INT 0"),
            "{records}"
        );
        let remap = std::fs::read_to_string(dir.path().join("etc/remap.config")).unwrap();
        assert!(remap.contains("http://127.0.0.1:5555/"), "{remap}");
        for f in CONFIG_FILES {
            let text = std::fs::read_to_string(dir.path().join("etc").join(f)).unwrap();
            assert!(!text.contains("{{"), "{f} has an unrendered placeholder");
        }
    }
}
