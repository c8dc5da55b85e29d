//! What a reload (SIGHUP) changes: the keys it applies, and one line for each key it
//! cannot apply while the process runs.
//!
//! How it fits: [`plan`] compares a newly loaded file with the config *in force* (the
//! start-up file, then after each reload the file as far as it was applied) and says
//! which restart-only keys differ. The server swaps in the compiled new config, applies
//! the live cache limits (`state::caches::apply_live`), logs one warning per
//! [`Plan::restart`] entry (`file:line: key: message`, the shape `-t` uses), and keeps
//! [`Plan::effective`] as the config in force for the next reload. Because that config
//! keeps the *running* value of each restart-only key, a change still pending is
//! reported again by every reload until a restart, and a live change applied once is
//! not reported again.
//!
//! Restart-only keys are those read once at start: the listening sockets and the worker
//! threads (`listen` addresses, `backlog`, `deferred`, `quic`, `quic_gso`, `quic_bpf`, `workers`, `worker_connections`,
//! `worker_cpu_affinity`, `accept`, `multi_accept`, `reuseport_steering`), the process's
//! logs, pid file, name and helpers (`error_log`, `pid`, `node_name`,
//! `demo_origin`, `admin.listen`, `[compress_pool]`, `aio.mode`, `aio.inline_writes`, `[aio.thread_pool]`),
//! and a kept cache zone's place on disk (`path`, `levels`: its files are laid out by
//! them). Everything else applies: added and removed cache zones, and a zone's limits
//! and pacing.

use crate::config::{key_line, key_line_in_table, line_of, Config, ConfigError, Source};
use std::fmt::Debug;

/// What [`plan`] decided.
#[derive(Debug)]
pub struct Plan {
    /// The config in force once the reload is applied: the new file, with every
    /// restart-only value as the process still runs it.
    pub effective: Config,
    /// One per restart-only key whose value changed, in file order: logged as a warning.
    pub restart: Vec<ConfigError>,
    /// Live changes to the cache zones (`cache "disk1": max_size 1073741824 -> 3145728`,
    /// `cache "disk2": added`): logged as information.
    pub applied: Vec<String>,
}

/// Compares `new` (read from `src`) with `running`, the config in force.
pub fn plan(running: &Config, new: &Config, src: &Source) -> Plan {
    let mut p = Planner {
        src,
        effective: new.clone(),
        restart: Vec::new(),
    };
    p.top_level(running, new);
    p.listeners(running, new);
    let applied = p.caches(running, new);
    let Planner {
        effective,
        mut restart,
        ..
    } = p;
    restart.sort_by_key(|e| e.line);
    Plan {
        effective,
        restart,
        applied,
    }
}

struct Planner<'a> {
    src: &'a Source,
    effective: Config,
    restart: Vec<ConfigError>,
}

impl Planner<'_> {
    fn note(&mut self, line: usize, key: &str, what: &str, running: &dyn Debug) {
        self.restart.push(ConfigError {
            file: self.src.name.clone(),
            line,
            key: key.into(),
            message: format!(
                "{what}changed, but it is read only at start: restart (or `edgecache -s upgrade`) to apply it; still running with {running:?}"
            ),
        });
    }

    fn top_level(&mut self, running: &Config, new: &Config) {
        macro_rules! keep {
            ($($field:ident).+, $key:expr) => {
                if new.$($field).+ != running.$($field).+ {
                    let line = key_line(&self.src.text, $key);
                    self.note(line, $key, "", &running.$($field).+);
                    self.effective.$($field).+ = running.$($field).+.clone();
                }
            };
        }
        keep!(workers, "workers");
        keep!(worker_connections, "worker_connections");
        keep!(worker_cpu_affinity, "worker_cpu_affinity");
        keep!(accept, "accept");
        keep!(multi_accept, "multi_accept");
        keep!(reuseport_steering, "reuseport_steering");
        keep!(pid, "pid");
        keep!(node_name, "node_name");
        keep!(error_log, "error_log");
        keep!(compress_pool, "compress_pool");
        keep!(aio.mode, "aio.mode");
        keep!(aio.inline_writes, "aio.inline_writes");
        keep!(aio.thread_pool, "aio.thread_pool");
        let origin = |c: &Config| c.demo_origin.as_ref().map(|s| s.get_ref().clone());
        if origin(new) != origin(running) {
            let line = key_line(&self.src.text, "demo_origin");
            self.note(line, "demo_origin", "", &origin(running));
            self.effective.demo_origin = running.demo_origin.clone();
        }
        let admin = |c: &Config| c.admin.as_ref().map(|a| a.listen.get_ref().clone());
        if admin(new) != admin(running) {
            let line = match new.admin.as_ref().map(|a| a.listen.span()) {
                Some(s) if s.end > 0 => line_of(&self.src.text, s.start),
                _ => key_line(&self.src.text, "admin.listen"),
            };
            self.note(line, "admin.listen", "", &admin(running));
            match (&mut self.effective.admin, &running.admin) {
                (Some(e), Some(r)) => e.listen = r.listen.clone(),
                (e, r) => *e = r.clone(),
            }
        }
    }

    fn listeners(&mut self, running: &Config, new: &Config) {
        if new.listen.len() != running.listen.len() {
            let anchor = new.listen.get(running.listen.len()).or(new.listen.last());
            let line = anchor.map_or(1, |l| line_of(&self.src.text, l.addr.span().start));
            let addrs: Vec<&String> = running.listen.iter().map(|l| l.addr.get_ref()).collect();
            self.note(line, "listen", "the number of listeners ", &addrs);
            self.effective.listen = running.listen.clone();
            return;
        }
        // The same addresses in another order: each keeps its index (workers accept on
        // the running sockets, and connections carry the index they were accepted
        // under), so the new settings (TLS, http2, backlog...) are put in the running
        // order, by address. No restart is needed.
        let mut by_addr: Vec<&crate::config::Listen> = Vec::with_capacity(running.listen.len());
        for r in &running.listen {
            match new
                .listen
                .iter()
                .find(|n| n.addr.get_ref() == r.addr.get_ref())
            {
                Some(n) => by_addr.push(n),
                None => break,
            }
        }
        let reordered = by_addr.len() == running.listen.len();
        if reordered {
            self.effective.listen = by_addr.iter().map(|&n| n.clone()).collect();
        } else {
            by_addr = new.listen.iter().collect();
        }
        for (i, (n, r)) in by_addr.into_iter().zip(&running.listen).enumerate() {
            let at = n.addr.span().start;
            if n.addr != r.addr {
                let line = line_of(&self.src.text, at);
                self.note(line, "listen.addr", "", r.addr.get_ref());
                self.effective.listen[i].addr = r.addr.clone();
            }
            if n.backlog != r.backlog {
                let line = key_line_in_table(&self.src.text, Some(at), "backlog");
                self.note(line, "listen.backlog", "", &r.backlog);
                self.effective.listen[i].backlog = r.backlog;
            }
            if n.deferred != r.deferred {
                let line = key_line_in_table(&self.src.text, Some(at), "deferred");
                self.note(line, "listen.deferred", "", &r.deferred);
                self.effective.listen[i].deferred = r.deferred;
            }
            // The UDP sockets are bound at start: quic is restart-only (its TLS,
            // alt_svc, quic_retry and early_data apply on reload).
            if n.quic != r.quic {
                let line = key_line_in_table(&self.src.text, Some(at), "quic");
                self.note(line, "listen.quic", "", &r.quic);
                self.effective.listen[i].quic = r.quic;
            }
            if n.quic_bpf != r.quic_bpf {
                let line = key_line_in_table(&self.src.text, Some(at), "quic_bpf");
                self.note(line, "listen.quic_bpf", "", &r.quic_bpf);
                self.effective.listen[i].quic_bpf = r.quic_bpf;
            }
            if n.quic_gso != r.quic_gso {
                let line = key_line_in_table(&self.src.text, Some(at), "quic_gso");
                self.note(line, "listen.quic_gso", "", &r.quic_gso);
                self.effective.listen[i].quic_gso = r.quic_gso;
            }
        }
    }

    /// Restart-only notes for kept zones' `path` and `levels`; the live changes as text.
    fn caches(&mut self, running: &Config, new: &Config) -> Vec<String> {
        let mut applied = Vec::new();
        for (i, z) in new.cache.iter().enumerate() {
            let name = z.name.get_ref();
            let Some(r) = running.cache.iter().find(|r| r.name.get_ref() == name) else {
                applied.push(format!("cache {name:?}: added"));
                continue;
            };
            let at = Some(z.name.span().start);
            let what = format!("cache {name:?}: ");
            if z.path != r.path {
                let line = key_line_in_table(&self.src.text, at, "path");
                self.note(line, "cache.path", &what, &r.path);
                self.effective.cache[i].path = r.path.clone();
            }
            if z.levels != r.levels {
                let line = key_line_in_table(&self.src.text, at, "levels");
                self.note(line, "cache.levels", &what, r.levels.get_ref());
                self.effective.cache[i].levels = r.levels.clone();
            }
            let mut live = Vec::new();
            macro_rules! live {
                ($field:ident, $show:expr) => {
                    if z.$field != r.$field {
                        let show = $show;
                        live.push(format!(
                            "{} {} -> {}",
                            stringify!($field),
                            show(&r.$field),
                            show(&z.$field)
                        ));
                    }
                };
            }
            let size = |s: &crate::config::Size| s.0.to_string();
            let dur = |d: &crate::config::Dur| format!("{:?}", d.0);
            let n = |n: &usize| n.to_string();
            live!(max_size, size);
            live!(min_free, size);
            live!(inactive, dur);
            live!(keys_zone, size);
            live!(loader_files, n);
            live!(loader_sleep, dur);
            live!(manager_files, n);
            live!(manager_threshold, dur);
            live!(manager_sleep, dur);
            live!(cache_verify, |v: &crate::config::CacheVerify| format!(
                "{v:?}"
            ));
            if !live.is_empty() {
                applied.push(format!("cache {name:?}: {}", live.join(", ")));
            }
        }
        for r in &running.cache {
            if !new.cache.iter().any(|z| z.name == r.name) {
                applied.push(format!(
                    "cache {:?}: removed (its files stay on disk)",
                    r.name.get_ref()
                ));
            }
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn cfg(text: &str) -> (Config, Source) {
        let c = parse("e.toml", text).unwrap_or_else(|e| panic!("{e}"));
        (
            c,
            Source {
                name: "e.toml".into(),
                text: text.into(),
            },
        )
    }

    fn file(cache: &str, top: &str) -> String {
        format!(
            "{top}\n[[listen]]\naddr = \"127.0.0.1:8080\"\n\n[[cache]]\nname = \"a\"\n{cache}\n\n[[upstream]]\nname = \"o\"\nservers = [\"127.0.0.1:8081\"]\n\n[[location]]\nprefix = \"/\"\nproxy = \"o\"\ncache = [\"a\"]\n"
        )
    }

    fn lines(p: &Plan) -> Vec<String> {
        p.restart.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn live_cache_keys_apply_without_a_restart_line() {
        let (old, _) = cfg(&file("path = \"/c\"\nmax_size = \"1g\"", ""));
        let (new, src) = cfg(&file(
            "path = \"/c\"\nmax_size = \"3m\"\nmin_free = \"1m\"\ninactive = \"1h\"\nkeys_zone = \"1m\"\nloader_files = 7\nloader_sleep = \"1s\"\nmanager_files = 9\nmanager_threshold = \"1s\"\nmanager_sleep = \"1s\"",
            "",
        ));
        let p = plan(&old, &new, &src);
        assert!(p.restart.is_empty(), "{:?}", lines(&p));
        assert_eq!(p.effective, new);
        assert_eq!(p.applied.len(), 1);
        let a = &p.applied[0];
        assert!(
            a.starts_with("cache \"a\": max_size 1073741824 -> 3145728, "),
            "{a}"
        );
        for k in [
            "min_free",
            "inactive",
            "keys_zone",
            "loader_files",
            "loader_sleep",
            "manager_files",
            "manager_threshold",
            "manager_sleep",
        ] {
            assert!(a.contains(&format!("{k} ")), "{k} in {a}");
        }
        // Applied once: the same file again changes nothing.
        let again = plan(&p.effective, &new, &src);
        assert!(again.restart.is_empty() && again.applied.is_empty());
    }

    #[test]
    fn restart_only_cache_keys_give_one_line_each_with_file_and_line() {
        let (old, _) = cfg(&file("path = \"/c\"", ""));
        let text = file("path = \"/d\"\nlevels = \"2\"\nmax_size = \"3m\"", "");
        let (new, src) = cfg(&text);
        let p = plan(&old, &new, &src);
        let path_line = text.lines().position(|l| l == "path = \"/d\"").unwrap() + 1;
        assert_eq!(
            lines(&p),
            vec![
                format!("e.toml:{path_line}: cache.path: cache \"a\": changed, but it is read only at start: restart (or `edgecache -s upgrade`) to apply it; still running with \"/c\""),
                format!("e.toml:{}: cache.levels: cache \"a\": changed, but it is read only at start: restart (or `edgecache -s upgrade`) to apply it; still running with \"1:2\"", path_line + 1),
            ]
        );
        // The running values stay in force; the live one is taken.
        assert_eq!(p.effective.cache[0].path, std::path::PathBuf::from("/c"));
        assert_eq!(p.effective.cache[0].levels.get_ref(), "1:2");
        assert_eq!(p.effective.cache[0].max_size.0, 3 << 20);
        // Still pending: the next reload of the same file says it again, and only it.
        let again = plan(&p.effective, &new, &src);
        assert_eq!(lines(&again), lines(&p));
        assert!(again.applied.is_empty(), "{:?}", again.applied);
        // Reverted in the file: nothing to say.
        let back = plan(&p.effective, &old, &src);
        assert!(back.restart.is_empty());
    }

    #[test]
    fn a_key_left_out_points_at_its_table() {
        let (old, _) = cfg(&file("path = \"/c\"\nlevels = \"2\"", ""));
        let text = file("path = \"/c\"", "");
        let (new, src) = cfg(&text);
        let p = plan(&old, &new, &src);
        let header = text.lines().position(|l| l == "[[cache]]").unwrap() + 1;
        assert_eq!(p.restart.len(), 1);
        assert_eq!(
            (p.restart[0].line, p.restart[0].key.as_str()),
            (header, "cache.levels")
        );
    }

    #[test]
    fn top_level_and_listener_keys() {
        let (old, _) = cfg(&file(
            "path = \"/c\"",
            "workers = 2\nkeepalive_timeout = \"5s\"",
        ));
        let text = file(
            "path = \"/c\"",
            "workers = 3\nkeepalive_timeout = \"9s\"\naccept = \"blocking\"",
        )
        .replace(
            "addr = \"127.0.0.1:8080\"",
            "addr = \"127.0.0.1:8090\"\nbacklog = 10",
        );
        let (new, src) = cfg(&text);
        let p = plan(&old, &new, &src);
        let keys: Vec<(usize, &str)> = p.restart.iter().map(|e| (e.line, e.key.as_str())).collect();
        assert_eq!(
            keys,
            vec![
                (1, "workers"),
                (3, "accept"),
                (5, "listen.addr"),
                (6, "listen.backlog")
            ]
        );
        assert!(p.restart[0]
            .message
            .ends_with("still running with Count(2)"));
        // keepalive_timeout is live: taken, not reported.
        assert_eq!(
            p.effective.keepalive_timeout.0,
            std::time::Duration::from_secs(9)
        );
        assert_eq!(p.effective.workers, old.workers);
        assert_eq!(p.effective.listen[0].addr.get_ref(), "127.0.0.1:8080");
        assert_eq!(p.effective.listen[0].backlog, old.listen[0].backlog);
    }

    /// Reordering `[[listen]]` keeps each address at its running index (connections
    /// carry that index) with its own new settings, and needs no restart.
    #[test]
    fn reordered_listeners_keep_their_index_and_settings() {
        let two = |first: &str, second: &str| {
            file("path = \"/c\"", "").replace(
                "[[listen]]\naddr = \"127.0.0.1:8080\"\n",
                &format!("[[listen]]\n{first}\n[[listen]]\n{second}\n"),
            )
        };
        let a = "addr = \"127.0.0.1:8080\"";
        let b = "addr = \"127.0.0.1:8090\"\nhttp2 = true";
        let (old, _) = cfg(&two(a, b));
        let text = two(b, &format!("{a}\nbacklog = 7"));
        let (new, src) = cfg(&text);
        let p = plan(&old, &new, &src);
        let addrs: Vec<&str> = p
            .effective
            .listen
            .iter()
            .map(|l| l.addr.get_ref().as_str())
            .collect();
        assert_eq!(addrs, ["127.0.0.1:8080", "127.0.0.1:8090"]);
        assert!(p.effective.listen[1].http2, "8090 keeps its http2");
        assert!(!p.effective.listen[0].http2);
        // The backlog of 8080 changed: still a restart-only key, at its new line.
        let keys: Vec<(usize, &str)> = p.restart.iter().map(|e| (e.line, e.key.as_str())).collect();
        let line = text.lines().position(|l| l == "backlog = 7").unwrap() + 1;
        assert_eq!(keys, vec![(line, "listen.backlog")]);
    }

    #[test]
    fn zones_added_and_removed_apply() {
        let (old, _) = cfg(&file("path = \"/c\"", ""));
        let text = file("path = \"/c\"", "")
            .replace("name = \"a\"", "name = \"b\"")
            .replace("cache = [\"a\"]", "cache = [\"b\"]");
        let (new, src) = cfg(&text);
        let p = plan(&old, &new, &src);
        assert!(p.restart.is_empty());
        assert_eq!(
            p.applied,
            vec![
                "cache \"b\": added".to_string(),
                "cache \"a\": removed (its files stay on disk)".to_string()
            ]
        );
    }
}
