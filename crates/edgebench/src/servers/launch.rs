//! Where one server instance runs ([`Ctx`]), the command that starts it ([`Launch`]),
//! and rendering a `bench/peers/` template into its run directory ([`render_to`]).
//!
//! How it fits: each kind's file (`nginx.rs`, ...) builds its config with these; the
//! parent module dispatches to the kinds. Its own module so that the kinds depend on it
//! and not on the parent that calls them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Context, Error, Result};
use crate::experiment::ServerSpec;
use crate::template;

/// Where and how one server instance runs.
#[derive(Debug, Clone)]
pub struct Ctx<'a> {
    /// `bench/` (holds `peers/`).
    pub bench_dir: &'a Path,
    /// This instance's private run directory (config, cache, logs).
    pub dir: &'a Path,
    pub port: u16,
    /// A second free port for an admin/metrics listener (`{{admin_port}}`).
    pub admin_port: u16,
    pub origin: SocketAddr,
}

/// The command that starts a prepared server.
#[derive(Debug, Clone)]
pub struct Launch {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// How long it may take to listen.
    pub ready_timeout: Duration,
}

/// The variables every template can use.
pub fn standard_vars(ctx: &Ctx) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert("dir".into(), ctx.dir.display().to_string());
    v.insert("port".into(), ctx.port.to_string());
    v.insert("admin_port".into(), ctx.admin_port.to_string());
    v.insert("origin".into(), ctx.origin.to_string());
    v.insert("origin_host".into(), ctx.origin.ip().to_string());
    v.insert("origin_port".into(), ctx.origin.port().to_string());
    v
}

/// Renders `bench/peers/<template>` with the standard variables plus `spec.vars` (which
/// win) and writes it to `<dir>/<out>`. Returns the path written.
pub(crate) fn render_to(
    spec: &ServerSpec,
    ctx: &Ctx,
    template_name: &str,
    out: &str,
) -> Result<PathBuf> {
    let src = ctx.bench_dir.join("peers").join(template_name);
    let text = std::fs::read_to_string(&src)
        .map_err(|e| Error::usage(format!("{}: cannot read template: {e}", src.display())))?;
    let mut vars = standard_vars(ctx);
    vars.extend(spec.vars.clone());
    let rendered = template::render(&src.display().to_string(), &text, &vars)
        .map_err(|e| Error::usage(format!("server {:?}: {e}", spec.name)))?;
    let dst = ctx.dir.join(out);
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).ctx(format!("creating {}", parent.display()))?;
    }
    std::fs::write(&dst, rendered).ctx(format!("writing {}", dst.display()))?;
    Ok(dst)
}
