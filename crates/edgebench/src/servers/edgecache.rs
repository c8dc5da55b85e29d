//! edgecache itself, from `bench/peers/edgecache.toml` plus the experiment's snippet.
//!
//! How it fits: the template is the baseline equivalent to the peers' (1 worker, access
//! log off, a cache on the run dir, `cache_valid 200 = 10m`, a keep-alive upstream). An
//! experiment's `config = """..."""` is parsed as TOML and deep-merged over it (tables
//! merge key by key; any other value, arrays included, replaces), so a variant states
//! only what differs: `[aio] mode = "io_uring"`. `{{dir}}` in a snippet is the server's
//! run directory (for a variant that replaces the `[[cache]]` array).

use std::time::Duration;

use super::launch::{render_to, Ctx, Launch};
use crate::error::{Context, Error, Result};
use crate::experiment::ServerSpec;

pub fn prepare(spec: &ServerSpec, ctx: &Ctx) -> Result<Launch> {
    let path = render_to(spec, ctx, "edgecache.toml", "edgecache.toml")?;
    if let Some(snippet) = &spec.config {
        let base_text =
            std::fs::read_to_string(&path).ctx(format!("reading {}", path.display()))?;
        // `{{dir}}` (the server's run directory) may appear in a snippet too: a variant
        // that replaces the `[[cache]]` array names its path with it.
        let snippet = snippet.replace("{{dir}}", &ctx.dir.display().to_string());
        let merged = merge(&base_text, &snippet)
            .map_err(|e| Error::usage(format!("server {:?}: {e}", spec.name)))?;
        std::fs::write(&path, merged).ctx(format!("writing {}", path.display()))?;
    }
    Ok(Launch {
        args: vec!["-c".into(), path.display().to_string()],
        env: vec![],
        ready_timeout: Duration::from_secs(15),
    })
}

/// `snippet` deep-merged over `base`, as TOML text.
pub fn merge(base: &str, snippet: &str) -> std::result::Result<String, String> {
    let mut b: toml::Table = base
        .parse()
        .map_err(|e| format!("edgecache.toml template: {e}"))?;
    let s: toml::Table = snippet
        .parse()
        .map_err(|e| format!("`config` snippet: {e}"))?;
    merge_tables(&mut b, s);
    toml::to_string(&b).map_err(|e| e.to_string())
}

fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(bt)), toml::Value::Table(ot)) => merge_tables(bt, ot),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::render;
    use super::super::ServerKind;
    use super::*;

    #[test]
    fn snippets_merge_deeply() {
        let base =
            "workers = 1\n[aio]\nmode = \"off\"\nsendfile = true\n[[listen]]\naddr = \"a\"\n";
        let out = merge(base, "workers = 2\n[aio]\nmode = \"io_uring\"\n").unwrap();
        let t: toml::Table = out.parse().unwrap();
        assert_eq!(t["workers"].as_integer(), Some(2));
        assert_eq!(t["aio"]["mode"].as_str(), Some("io_uring"));
        assert_eq!(
            t["aio"]["sendfile"].as_bool(),
            Some(true),
            "untouched keys survive"
        );
        assert_eq!(t["listen"][0]["addr"].as_str(), Some("a"));
        assert!(merge(base, "[aio\n").unwrap_err().contains("snippet"));
    }

    #[test]
    fn renders_the_shipped_template() {
        let (l, dir) = render(
            ServerKind::Edgecache,
            &[],
            Some("[aio]\nmode = \"threads\""),
        );
        assert_eq!(l.args[0], "-c");
        let t: toml::Table = std::fs::read_to_string(dir.path().join("edgecache.toml"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(t["listen"][0]["addr"].as_str(), Some("127.0.0.1:4321"));
        assert_eq!(
            t["upstream"][0]["servers"][0].as_str(),
            Some("127.0.0.1:5555")
        );
        assert_eq!(t["aio"]["mode"].as_str(), Some("threads"));
        assert_eq!(t["workers"].as_integer(), Some(1));
    }

    #[test]
    fn the_tiers_experiment_adds_a_ram_tier_per_policy() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/experiments/tiers.toml"
        );
        let exp = crate::experiment::Experiment::load(std::path::Path::new(path)).unwrap();
        let mut policies = Vec::new();
        for s in exp
            .servers
            .iter()
            .filter(|s| s.kind == ServerKind::Edgecache)
        {
            let (_, dir) = render(ServerKind::Edgecache, &[], s.config.as_deref());
            let t: toml::Table = std::fs::read_to_string(dir.path().join("edgecache.toml"))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(t["cache"][0]["name"].as_str(), Some("bench"), "{}", s.name);
            match t.get("memory_cache") {
                Some(m) if m["size"].as_str() == Some("off") => policies.push("none".into()),
                Some(m) => {
                    assert_eq!(m["size"].as_str(), Some("32m"), "{}", s.name);
                    assert_eq!(m["max_object_size"].as_str(), Some("1m"), "{}", s.name);
                    policies.push(m["policy"].as_str().unwrap().to_string());
                }
                None => panic!("{}: the template states `size = \"off\"`", s.name),
            }
        }
        assert_eq!(policies, ["s3fifo", "tinylfu", "lru", "none"]);
    }
}
