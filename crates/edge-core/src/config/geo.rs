//! `[[geo]]` (nginx's `geo`): a variable whose value is looked up by address in a table
//! of networks, given inline (`ranges`) or as a `network,value` file (`file`).
//!
//! The table is built when the config is parsed (so `edgecache -t` reads the file and
//! names a bad line), kept in the config's [`GeoSlot`], and taken from there by the
//! state build: a start or a reload reads the file once, on the thread that builds the
//! new state, never on a worker.

use super::verr::{err, VErr};
use super::Config;
use crate::access::cidr::Cidr;
use crate::access::geo::{check_value, load_csv, GeoBuilder, GeoTable, MAX_GEO_NETWORKS};
use crate::vars::{Known, Template, Var};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use toml::Spanned;

/// Most `[[geo]]`s (their index is a u16 in compiled templates).
pub const MAX_GEOS: usize = 4096;

/// `[[geo]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoCfg {
    /// The variable it defines, `"$country"`.
    pub variable: Spanned<String>,
    /// A template whose value is the address looked up; None: `$remote_addr`.
    #[serde(default)]
    pub source: Option<Spanned<String>>,
    /// The value when no network holds the address, or the source is not an address.
    #[serde(default)]
    pub default: Option<Spanned<String>>,
    /// Networks and their values.
    #[serde(default)]
    pub ranges: Option<Spanned<BTreeMap<String, String>>>,
    /// A `network,value` file, relative to the config file's directory.
    #[serde(default)]
    pub file: Option<Spanned<PathBuf>>,
    /// The table, once parsed.
    #[serde(skip)]
    pub loaded: GeoSlot,
}

/// Where a parsed config keeps a geo table until the state build takes it. Clones of
/// the config share it. It is no part of the config's value: two configs with the same
/// text compare equal whatever their slots hold.
#[derive(Clone, Default)]
pub struct GeoSlot(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    /// `file`, resolved against the config file's directory.
    path: Option<PathBuf>,
    table: Option<Arc<GeoTable>>,
}

impl std::fmt::Debug for GeoSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GeoSlot")
    }
}

impl PartialEq for GeoSlot {
    fn eq(&self, _: &GeoSlot) -> bool {
        true
    }
}

impl Eq for GeoSlot {}

impl GeoSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // A panic while the lock was held cannot leave a half-written slot.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl GeoCfg {
    /// The table: the one parsing built (taken: the config does not keep it alive), or
    /// built again (a config that did not come from [`super::parse`], or taken already).
    pub fn table(&self) -> Result<Arc<GeoTable>, String> {
        let mut slot = self.loaded.lock();
        if let Some(t) = slot.table.take() {
            return Ok(t);
        }
        let path = slot.path.clone();
        drop(slot);
        self.build(path.as_deref()).map(Arc::new)
    }

    /// Builds the table: `ranges`, or `file` (at `path` when resolved).
    fn build(&self, path: Option<&Path>) -> Result<GeoTable, String> {
        if let Some(r) = &self.ranges {
            let mut b = GeoBuilder::default();
            for (net, value) in r.get_ref() {
                let cidr = Cidr::parse(net).map_err(|_| format!("bad network {net:?}"))?;
                check_value(value)?;
                b.insert(cidr, value)?;
            }
            return Ok(b.build());
        }
        match (&self.file, path) {
            (_, Some(p)) => load_csv(p),
            (Some(f), None) => load_csv(f.get_ref()),
            (None, None) => Err("needs ranges or file".into()),
        }
    }

    /// The variable's name, without `$`.
    pub fn name(&self) -> &str {
        self.variable
            .get_ref()
            .strip_prefix('$')
            .unwrap_or(self.variable.get_ref())
    }
}

/// Declares the geo variables (before the maps, whose templates may read them).
pub(super) fn declare(cfg: &Config, k: &mut Known) -> Result<(), VErr> {
    if cfg.geo.len() > MAX_GEOS {
        return err(None, "geo", format!("at most {MAX_GEOS} [[geo]]s"));
    }
    for (i, g) in cfg.geo.iter().enumerate() {
        let v = g.variable.get_ref();
        let name = v.strip_prefix('$').unwrap_or("");
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return err(
                Some(g.variable.span()),
                "geo.variable",
                format!("{v:?} is not a variable name such as \"$country\""),
            );
        }
        if k.defines(name) {
            return err(
                Some(g.variable.span()),
                "geo.variable",
                format!("\"${name}\" is already a variable"),
            );
        }
        k.add_geo(name, i as u16);
    }
    Ok(())
}

/// The source template, compiled; None for `$remote_addr` (the default, read without
/// rendering). A source may not read map or geo variables (they may read this one).
pub fn source(g: &GeoCfg, known: &Known) -> Result<Option<Template>, String> {
    let Some(s) = &g.source else { return Ok(None) };
    let t = Template::compile(s.get_ref(), known).map_err(|e| e.to_string())?;
    if let Some(v) = t.vars().find(|v| matches!(v, Var::Map(_) | Var::Geo(_))) {
        let what = match v {
            Var::Map(_) => "a [[map]] variable",
            _ => "a [[geo]] variable",
        };
        return Err(format!(
            "{:?} reads {what}: a geo source reads request variables only",
            s.get_ref()
        ));
    }
    let plain = matches!(
        t.pieces().collect::<Vec<_>>()[..],
        [crate::vars::Piece::Var(Var::RemoteAddr)]
    );
    Ok((!plain).then_some(t))
}

/// The `-t` checks of `[[geo]]` that need no file: one of `ranges` and `file`, a source
/// that compiles, a default a variable may hold.
pub(super) fn validate(cfg: &Config, known: &Known) -> Result<(), VErr> {
    for g in &cfg.geo {
        let at = Some(g.variable.span());
        match (&g.ranges, &g.file) {
            (Some(_), Some(f)) => {
                return err(Some(f.span()), "geo.file", "set ranges or file, not both")
            }
            (None, None) => {
                return err(
                    at,
                    "geo",
                    "needs ranges = { \"10.0.0.0/8\" = \"value\" } or file = \"geo.csv\"",
                )
            }
            (Some(r), None) if r.get_ref().len() > MAX_GEO_NETWORKS => {
                return err(
                    Some(r.span()),
                    "geo.ranges",
                    format!("at most {MAX_GEO_NETWORKS} networks"),
                )
            }
            _ => {}
        }
        if let Some(s) = &g.source {
            source(g, known).map_err(|m| VErr {
                span: Some(s.span()).filter(|s| s.end > 0),
                key: "geo.source".into(),
                message: m,
            })?;
        }
        if let Some(d) = &g.default {
            if let Err(m) = check_value(d.get_ref()) {
                return err(Some(d.span()), "geo.default", m);
            }
        }
    }
    Ok(())
}

/// Builds every geo table of a validated config, reading files relative to `base` (the
/// config file's directory), and keeps each in its slot for the state build. A bad
/// network or an unreadable file is an error at the `ranges` or `file` key, the file's
/// own line in the message (`geo.csv:123: bad network "10.0.0.300/8"`).
pub(super) fn load(cfg: &Config, base: &Path) -> Result<(), VErr> {
    for g in &cfg.geo {
        let path = g.file.as_ref().map(|f| base.join(f.get_ref()));
        let (key, span) = match (&g.file, &g.ranges) {
            (Some(f), _) => ("geo.file", f.span()),
            (None, Some(r)) => ("geo.ranges", r.span()),
            (None, None) => ("geo", g.variable.span()),
        };
        let table = g.build(path.as_deref()).map_err(|m| VErr {
            span: Some(span).filter(|s| s.end > 0),
            key: key.into(),
            message: m,
        })?;
        let mut slot = g.loaded.lock();
        slot.path = path;
        slot.table = Some(Arc::new(table));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{err, MIN};
    use super::*;

    #[test]
    fn ranges_and_files_load_when_parsed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("geo.csv"),
            "10.0.0.0/8,internal\n2001:db8::/32,doc\n",
        )
        .unwrap();
        let cfg_path = dir.path().join("edgecache.toml");
        let text = format!(
            "{MIN}[[geo]]\nvariable = \"$net\"\nfile = \"geo.csv\"\ndefault = \"ZZ\"\n\
             [[geo]]\nvariable = \"$inline\"\nsource = \"$http_x_ip\"\nranges = {{ \"192.0.2.0/24\" = \"doc\", \"10.1.0.0/16\" = \"lab\" }}\n\
             [[map]]\nsource = \"$net\"\nvariable = \"$is_internal\"\nentries = [{{ match = \"internal\", value = \"1\" }}]\n"
        );
        // The file is found next to the config, not in the working directory.
        let cfg = parse(&cfg_path.display().to_string(), &text).unwrap();
        let net = cfg.geo[0].table().unwrap();
        assert_eq!(net.lookup("10.1.1.1".parse().unwrap()), Some("internal"));
        assert_eq!(net.lookup("2001:db8::7".parse().unwrap()), Some("doc"));
        // Taken: built again from the resolved path on a second call.
        assert_eq!(cfg.geo[0].table().unwrap().networks(), 2);
        let inline = cfg.geo[1].table().unwrap();
        assert_eq!(inline.lookup("10.1.1.1".parse().unwrap()), Some("lab"));
        let known = super::super::sites::known(&cfg);
        assert!(source(&cfg.geo[0], &known).unwrap().is_none());
        assert!(source(&cfg.geo[1], &known).unwrap().is_some());
        // Relative to the working directory, the file is not there.
        let e = err(&text);
        assert_eq!(e.key, "geo.file");
        assert!(e.message.contains("geo.csv: cannot read:"), "{e}");
    }

    #[test]
    fn bad_geo_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("geo.csv"),
            "# countries\n10.0.0.0/8,A\n\n10.0.0.300/8,B\n",
        )
        .unwrap();
        let name = dir.path().join("e.toml").display().to_string();
        let e = parse(
            &name,
            &format!("{MIN}[[geo]]\nvariable = \"$c\"\nfile = \"geo.csv\"\n"),
        )
        .unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("geo.file", 5));
        assert!(
            e.message
                .ends_with("geo.csv:4: bad network \"10.0.0.300/8\""),
            "{e}"
        );
        for (geo, key, says) in [
            ("variable = \"$c\"\n", "geo", "needs ranges"),
            (
                "variable = \"$c\"\nranges = {}\nfile = \"x.csv\"\n",
                "geo.file",
                "not both",
            ),
            (
                "variable = \"c\"\nranges = {}\n",
                "geo.variable",
                "not a variable name",
            ),
            (
                "variable = \"$host\"\nranges = {}\n",
                "geo.variable",
                "already a variable",
            ),
            (
                "variable = \"$c\"\nranges = { \"10.0.0.0/33\" = \"x\" }\n",
                "geo.ranges",
                "bad network \"10.0.0.0/33\"",
            ),
            (
                "variable = \"$c\"\nranges = { \"10.0.0.0/8\" = \"a\\nb\" }\n",
                "geo.ranges",
                "control character",
            ),
            (
                "variable = \"$c\"\nranges = {}\ndefault = \"\\u0001\"\n",
                "geo.default",
                "control character",
            ),
            (
                "variable = \"$c\"\nranges = {}\nsource = \"$nope\"\n",
                "geo.source",
                "unknown variable",
            ),
            (
                "variable = \"$c\"\nranges = {}\nsource = \"$c\"\n",
                "geo.source",
                "geo source reads request variables only",
            ),
        ] {
            let e = err(&format!("{MIN}[[geo]]\n{geo}"));
            assert_eq!(
                (e.key.as_str(), e.message.contains(says)),
                (key, true),
                "{geo}: {e}"
            );
        }
        // Two geos with one name, and a map with a geo's name.
        let e = err(&format!(
            "{MIN}[[geo]]\nvariable = \"$c\"\nranges = {{}}\n[[geo]]\nvariable = \"$c\"\nranges = {{}}\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("geo.variable", 7));
        let e = err(&format!(
            "{MIN}[[geo]]\nvariable = \"$c\"\nranges = {{}}\n[[map]]\nsource = \"$uri\"\nvariable = \"$c\"\n"
        ));
        assert_eq!(e.key, "map.variable");
        // A map as a geo's source is refused (a geo may feed a map, not the reverse).
        let e = err(&format!(
            "{MIN}[[map]]\nsource = \"$uri\"\nvariable = \"$m\"\n[[geo]]\nvariable = \"$c\"\nranges = {{}}\nsource = \"$m\"\n"
        ));
        assert!(e.message.contains("a [[map]] variable"), "{e}");
    }
}
