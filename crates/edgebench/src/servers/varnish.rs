//! Varnish Cache with malloc storage and one thread pool, from `bench/peers/varnish.vcl`.
//!
//! How it fits: `varnishd -F` (foreground) with its working directory (`-n`) inside the
//! run dir, listening on the cell's loopback port. The VCL points at the origin, gives
//! 200s the same 10 minute TTL as nginx's `proxy_cache_valid`, and sets
//! `X-Cache-Status` from `obj.hits`. Storage and thread parameters are experiment
//! variables (`storage`, `thread_pools`, `params`).

use std::time::Duration;

use super::launch::{render_to, Ctx, Launch};
use crate::error::Result;
use crate::experiment::ServerSpec;

pub fn prepare(spec: &ServerSpec, ctx: &Ctx) -> Result<Launch> {
    let vcl = render_to(spec, ctx, "varnish.vcl", "default.vcl")?;
    let var = |k: &str, d: &str| spec.vars.get(k).cloned().unwrap_or_else(|| d.to_string());
    let mut args = vec![
        "-F".into(),
        "-a".into(),
        format!("127.0.0.1:{}", ctx.port),
        "-f".into(),
        vcl.display().to_string(),
        "-s".into(),
        var("storage", "malloc,256m"),
        "-n".into(),
        ctx.dir.join("varnish").display().to_string(),
        "-p".into(),
        format!("thread_pools={}", var("thread_pools", "1")),
    ];
    // Extra `-p name=value` pairs, space separated.
    for p in var("params", "").split_whitespace() {
        args.push("-p".into());
        args.push(p.to_string());
    }
    Ok(Launch {
        args,
        env: vec![],
        ready_timeout: Duration::from_secs(30),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::render;
    use super::super::ServerKind;

    #[test]
    fn renders_vcl_and_arguments() {
        let (l, dir) = render(
            ServerKind::Varnish,
            &[("params", "thread_pool_min=10")],
            None,
        );
        let a = l.args.join(" ");
        assert!(a.starts_with("-F -a 127.0.0.1:4321 -f "), "{a}");
        assert!(
            a.contains("-s malloc,256m")
                && a.contains("thread_pools=1")
                && a.ends_with("-p thread_pool_min=10"),
            "{a}"
        );
        let vcl = std::fs::read_to_string(dir.path().join("default.vcl")).unwrap();
        assert!(vcl.contains(".port = \"5555\""), "{vcl}");
        assert!(vcl.contains("X-Cache-Status"), "{vcl}");
    }
}
