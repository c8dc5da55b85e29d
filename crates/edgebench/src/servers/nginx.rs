//! nginx with `proxy_cache`, from `bench/peers/nginx.conf`.
//!
//! How it fits: the template holds the baseline (1 worker, access_log off, a cache zone
//! on the run dir, `proxy_cache_valid 200 10m`, a keep-alive upstream); variants (aio
//! threads, aio on + directio, gzip, accept_mutex, reuseport) are template variables set
//! by the experiment file. nginx runs in the foreground (`daemon off`) with its prefix,
//! pid file, temp paths and error log inside the run dir.

use std::time::Duration;

use super::launch::{render_to, Ctx, Launch};
use crate::error::Result;
use crate::experiment::ServerSpec;

pub fn prepare(spec: &ServerSpec, ctx: &Ctx) -> Result<Launch> {
    let conf = render_to(spec, ctx, "nginx.conf", "nginx.conf")?;
    let dir = ctx.dir.display().to_string();
    Ok(Launch {
        args: vec![
            "-p".into(),
            format!("{dir}/"),
            "-e".into(),
            format!("{dir}/error.log"),
            "-c".into(),
            conf.display().to_string(),
        ],
        env: vec![],
        ready_timeout: Duration::from_secs(15),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::render;
    use super::super::ServerKind;

    #[test]
    fn renders_the_shipped_template_with_variants() {
        let (l, dir) = render(
            ServerKind::Nginx,
            &[("location_extra", "aio threads;")],
            None,
        );
        assert_eq!(l.args[4], "-c");
        let conf = std::fs::read_to_string(dir.path().join("nginx.conf")).unwrap();
        assert!(conf.contains("listen 127.0.0.1:4321"), "{conf}");
        assert!(conf.contains("server 127.0.0.1:5555"), "{conf}");
        assert!(conf.contains("aio threads;"), "{conf}");
        assert!(conf.contains("worker_processes 1;"), "{conf}");
        assert!(conf.contains("daemon off;"), "{conf}");
        assert!(!conf.contains("{{"), "unrendered placeholder:\n{conf}");
    }
}
