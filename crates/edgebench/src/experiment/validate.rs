//! Reading an experiment file and checking it whole before anything runs: every
//! duration, size, URL group and name it holds, with errors that say which and why.

use std::collections::BTreeSet;
use std::path::Path;

use super::spec::{Experiment, Metric};
use super::units::{parse_duration, parse_size};
use super::urls::{expand_paths, workload_paths, zipf_of};
use super::MAX_REPETITIONS;
use crate::error::{Error, Result};
use crate::kind::ServerKind;

impl Experiment {
    /// Reads and validates `path`. Errors name the file.
    pub fn load(path: &Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::usage(format!("{}: cannot read experiment: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|e| Error::usage(format!("{}: {e}", path.display())))
    }

    /// Parses and validates an experiment from TOML text.
    pub fn parse(text: &str) -> std::result::Result<Experiment, String> {
        let exp: Experiment = toml::from_str(text).map_err(|e| e.to_string())?;
        exp.validate()?;
        Ok(exp)
    }

    /// `--also NAME=PROGRAM`: for each, a row that runs another edgecache build, a copy
    /// of the row named "edgecache" (else of the first edgecache row: its `vars` and
    /// `config`) with that name and `program`, placed after it in the given order, so
    /// that every experiment can put a build beside the current one.
    pub fn add_builds(&mut self, builds: &[(String, String)]) -> std::result::Result<(), String> {
        let Some(i) = (self.servers.iter().position(|s| s.name == "edgecache")).or_else(|| {
            self.servers
                .iter()
                .position(|s| s.kind == ServerKind::Edgecache)
        }) else {
            return Err("the experiment has no edgecache row to copy".into());
        };
        for (k, (name, program)) in builds.iter().enumerate() {
            let mut row = self.servers[i].clone();
            row.name = name.clone();
            row.program = Some(program.clone());
            self.servers.insert(i + 1 + k, row);
        }
        self.validate()
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.servers.is_empty() || self.workloads.is_empty() {
            return Err("an experiment needs at least one [[server]] and one [[workload]]".into());
        }
        if self.repetitions == 0 || self.repetitions > MAX_REPETITIONS {
            return Err(format!("repetitions must be 1..={MAX_REPETITIONS}"));
        }
        parse_duration(&self.duration).map_err(|e| format!("duration: {e}"))?;
        if let Some(w) = &self.warmup {
            parse_duration(w).map_err(|e| format!("warmup: {e}"))?;
        }
        let mut names = BTreeSet::new();
        for s in &self.servers {
            if !names.insert(s.name.as_str()) {
                return Err(format!("server name {:?} appears twice", s.name));
            }
            if s.config.is_some() && s.kind != ServerKind::Edgecache {
                return Err(format!(
                    "server {:?}: `config` applies to kind = \"edgecache\" only; use `vars`",
                    s.name
                ));
            }
            if let Some(p) = &s.program {
                if s.kind != ServerKind::Edgecache {
                    return Err(format!(
                        "server {:?}: `program` applies to kind = \"edgecache\" only (peers: EDGEBENCH_NGINX etc.)",
                        s.name
                    ));
                }
                // The variables are read when the run starts: a shipped experiment that
                // names one parses without it.
                expand_with(p, |_| Some(String::new()))
                    .map_err(|e| format!("server {:?}: program: {e}", s.name))?;
            }
        }
        if !self.servers.iter().any(|s| s.kind == ServerKind::Edgecache) {
            return Err("an experiment needs at least one server of kind \"edgecache\"".into());
        }
        let mut wnames = BTreeSet::new();
        for w in &self.workloads {
            if !wnames.insert(w.name.as_str()) {
                return Err(format!("workload name {:?} appears twice", w.name));
            }
            if w.connections == 0 || w.threads == 0 || w.threads > w.connections {
                return Err(format!(
                    "workload {:?}: need 1 <= threads <= connections",
                    w.name
                ));
            }
            if let Some(d) = &w.duration {
                parse_duration(d).map_err(|e| format!("workload {:?}: duration: {e}", w.name))?;
            }
            workload_paths(&w.urls, self.expect)
                .map_err(|e| format!("workload {:?}: {e}", w.name))?;
            zipf_of(&w.urls).map_err(|e| format!("workload {:?}: {e}", w.name))?;
            if let Some(b) = &w.before {
                let what = format!("workload {:?}: before", w.name);
                if b.connections == 0 || b.threads == 0 || b.threads > b.connections {
                    return Err(format!("{what}: need 1 <= threads <= connections"));
                }
                if b.requests == Some(0) {
                    return Err(format!("{what}: requests must be at least 1"));
                }
                if let Some(d) = &b.duration {
                    parse_duration(d).map_err(|e| format!("{what}: duration: {e}"))?;
                }
                expand_paths(&b.urls).map_err(|e| format!("{what}: {e}"))?;
                zipf_of(&b.urls).map_err(|e| format!("{what}: {e}"))?;
            }
            if let Some(p) = &w.probe {
                if p.connections == 0 || p.threads == 0 || p.threads > p.connections {
                    return Err(format!(
                        "workload {:?}: probe: need 1 <= threads <= connections",
                        w.name
                    ));
                }
                if p.rate == Some(0) {
                    return Err(format!("workload {:?}: probe: rate must be > 0", w.name));
                }
                expand_paths(&p.urls).map_err(|e| format!("workload {:?}: probe: {e}", w.name))?;
                zipf_of(&p.urls).map_err(|e| format!("workload {:?}: probe: {e}", w.name))?;
            }
            if let Some(s) = &w.object_size {
                parse_size(s).map_err(|e| format!("workload {:?}: object_size: {e}", w.name))?;
            }
            if let Some(t) = &w.timeout {
                parse_duration(t).map_err(|e| format!("workload {:?}: timeout: {e}", w.name))?;
            }
        }
        if let Some(m) = &self.memory_limit {
            let b = parse_size(m).map_err(|e| format!("memory_limit: {e}"))?;
            if b < 16 << 20 {
                return Err(format!(
                    "memory_limit {m:?} is under 16m: no server starts in that"
                ));
            }
        }
        if let Some(f) = &self.fio {
            parse_size(&f.size).map_err(|e| format!("[fio] size: {e}"))?;
            if let Some(r) = &f.runtime {
                parse_duration(r).map_err(|e| format!("[fio] runtime: {e}"))?;
            }
            if f.ioengine.is_empty()
                || !f
                    .ioengine
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(format!(
                    "[fio] ioengine {:?}: expected io_uring or libaio",
                    f.ioengine
                ));
            }
        }
        if self.metrics.iter().any(|m| m.is_empty()) {
            return Err("metrics: an empty prefix would match everything".into());
        }
        let snames: BTreeSet<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
        for t in &self.targets {
            let what = format!("target {:?}", t.label);
            if !wnames.contains(t.workload.as_str()) {
                return Err(format!("{what}: unknown workload {:?}", t.workload));
            }
            let names = t.server.names();
            if names.is_empty() {
                return Err(format!("{what}: `server` names no server"));
            }
            for n in &names {
                if !snames.contains(n.as_str()) {
                    return Err(format!("{what}: unknown server {n:?}"));
                }
            }
            if t.vs == "fio" {
                if t.metric != Metric::Mbps {
                    return Err(format!(
                        "{what}: vs = \"fio\" compares metric = \"mbps\" only"
                    ));
                }
                if self.fio.is_none() {
                    return Err(format!("{what}: vs = \"fio\" needs a [fio] section"));
                }
            } else if !snames.contains(t.vs.as_str()) {
                return Err(format!("{what}: unknown server {:?} in `vs`", t.vs));
            }
            match (t.min, t.max) {
                (Some(x), None) | (None, Some(x)) if x.is_finite() && x > 0.0 => {}
                _ => {
                    return Err(format!(
                        "{what}: give exactly one of `min` or `max` (a ratio > 0)"
                    ))
                }
            }
        }
        if let Some(q) = &self.quick.workloads {
            for n in q {
                if !wnames.contains(n.as_str()) {
                    return Err(format!("[quick] workloads names unknown workload {n:?}"));
                }
            }
        }
        for d in [&self.quick.duration, &self.quick.warmup]
            .into_iter()
            .flatten()
        {
            parse_duration(d).map_err(|e| format!("[quick]: {e}"))?;
        }
        Ok(())
    }
}

/// `text` with every `$NAME` and `${NAME}` replaced by that environment variable's
/// value; an unset variable is an error naming it.
pub fn expand_env(text: &str) -> std::result::Result<String, String> {
    expand_with(text, |name| std::env::var(name).ok())
}

/// [`expand_env`] with the variables from `lookup`.
fn expand_with(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(inner) => {
                let end = inner
                    .find('}')
                    .ok_or_else(|| format!("`${{` without `}}` in {text:?}"))?;
                (&inner[..end], &inner[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if name.is_empty() {
            return Err(format!("`$` without a variable name in {text:?}"));
        }
        let value =
            lookup(name).ok_or_else(|| format!("environment variable {name} is not set"))?;
        out.push_str(&value);
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}
