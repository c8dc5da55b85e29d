//! `secure_link = { secret_file, expires_arg, signature_arg, include }` (signed URLs,
//! `docs/limits.md`): its config types, its checks, and the reading of the secret files.
//!
//! The secrets are read when the config is loaded ([`load_secrets`], after the semantic
//! checks), so that `edgecache -t` reports a missing, empty or unreadable file as
//! `file:line: secure_link.secret_file: ...`, and a reload (SIGHUP loads the file again)
//! reads them afresh or is refused with that error. The bytes live in the config from
//! then on: the state layer builds its HMAC keys from them and never opens a file.

use super::verr::{err, VErr};
use crate::vars::{Known, Template, Var};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// Most secret files in one `secret_file` list (the first signs, all verify).
pub const MAX_SECRETS: usize = 8;
/// Most `include` templates.
pub const MAX_INCLUDE: usize = 16;
/// Longest secret file: a secret is a key, not a file of data.
pub const MAX_SECRET_BYTES: usize = 4096;
/// Longest `expires_arg` / `signature_arg` name.
pub const MAX_ARG_NAME: usize = 64;

/// One `secure_link` (a location's, or a `[[server]]`'s for its locations that set
/// none).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecureLinkCfg {
    /// One path, or a list of up to [`MAX_SECRETS`] (rotation: the first signs, every
    /// one verifies). Relative paths are relative to the config file's directory.
    pub secret_file: Spanned<SecretFiles>,
    /// The query argument holding the expiry (Unix seconds).
    #[serde(default = "default_expires_arg")]
    pub expires_arg: Spanned<String>,
    /// The query argument holding the signature (hex HMAC-SHA256).
    #[serde(default = "default_signature_arg")]
    pub signature_arg: Spanned<String>,
    /// Templates whose values are signed, in order, before the expiry.
    #[serde(default = "default_include")]
    pub include: Spanned<Vec<String>>,
    /// The secrets' bytes, in `secret_file` order; filled by [`load_secrets`].
    #[serde(skip)]
    pub secrets: Secrets,
}

fn default_expires_arg() -> Spanned<String> {
    Spanned::new(0..0, "expires".into())
}
fn default_signature_arg() -> Spanned<String> {
    Spanned::new(0..0, "sig".into())
}
fn default_include() -> Spanned<Vec<String>> {
    Spanned::new(0..0, vec!["$uri".into()])
}

/// `secret_file`: a path or a list of paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFiles(pub Vec<PathBuf>);

impl<'de> Deserialize<'de> for SecretFiles {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SecretFiles;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path, or a list of paths (the first signs, all verify)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SecretFiles, E> {
                Ok(SecretFiles(vec![PathBuf::from(s)]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SecretFiles, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(PathBuf::from(s));
                }
                Ok(SecretFiles(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The bytes of the secret files (each with a trailing newline stripped), in
/// `secret_file` order. `Debug` prints how many, never the bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(pub Vec<Arc<[u8]>>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} read)", self.0.len())
    }
}

/// Reads one secret file: its bytes, less one trailing `\n` (or `\r\n`). An empty,
/// unreadable or oversized file is an error naming the path.
pub fn read_secret(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let shown = path.display();
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read {shown:?}: {e}"))?;
    // Not a FIFO or a device: reading one could block the load, or never end.
    match f.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{shown:?} is not a regular file")),
        Err(e) => return Err(format!("cannot read {shown:?}: {e}")),
    }
    let mut bytes = Vec::new();
    f.take(MAX_SECRET_BYTES as u64 + 3)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown:?}: {e}"))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    if bytes.len() > MAX_SECRET_BYTES {
        return Err(format!(
            "{shown:?} is longer than {MAX_SECRET_BYTES} bytes (a secret is a key, such as 32 random bytes or their hex)"
        ));
    }
    if bytes.is_empty() {
        return Err(format!(
            "{shown:?} is empty (write a secret into it, e.g. `openssl rand -hex 32 > FILE`)"
        ));
    }
    Ok(bytes)
}

fn verr<T>(s: &Spanned<T>, key: &str, message: String) -> VErr {
    VErr {
        span: Some(s.span()).filter(|s| s.end > 0),
        key: key.into(),
        message,
    }
}

/// A query argument name we own: letters, digits, `-`, `_`, `.` and `~` (RFC 3986
/// unreserved: it needs no escaping, so the name in the query is the name as written).
fn check_arg_name(name: &Spanned<String>, key: &str) -> Result<(), VErr> {
    let n = name.get_ref();
    let ok = !n.is_empty()
        && n.len() <= MAX_ARG_NAME
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b));
    if !ok {
        return Err(verr(
            name,
            key,
            format!("{n:?} is not a query argument name (1 to {MAX_ARG_NAME} letters, digits, '-', '_', '.', '~')"),
        ));
    }
    Ok(())
}

/// Variables that have no value while a request is checked (they are the access log's).
fn log_time(v: &Var) -> bool {
    matches!(
        v,
        Var::Status
            | Var::Request
            | Var::TimeIso8601
            | Var::TimeLocal
            | Var::UpstreamCacheStatus
            | Var::BodyBytesSent
            | Var::BytesSent
            | Var::RequestLength
            | Var::RequestTime
            | Var::UpstreamResponseTime
    )
}

/// Compiles the `include` templates of a checked `secure_link` (the state layer builds
/// the verifier from them).
pub fn include_templates(cfg: &SecureLinkCfg, known: &Known) -> Result<Vec<Template>, String> {
    cfg.include
        .get_ref()
        .iter()
        .map(|src| {
            let t = Template::compile(src, known).map_err(|e| format!("{src:?}: {e}"))?;
            if t.vars().any(log_time) {
                return Err(format!(
                    "{src:?} reads an access-log variable ($status, $request, $request_time, ...): it has no value while a request is checked"
                ));
            }
            Ok(t)
        })
        .collect()
}

/// Every `secure_link` of the config (the servers' and the locations'; a location has
/// its server's when it sets none): argument names, the `include` templates, the
/// number of secret files.
pub(super) fn validate(cfg: &super::Config, known: &Known) -> Result<(), VErr> {
    let top = cfg.location.iter().filter_map(|l| l.secure_link.as_ref());
    let servers = cfg.server.iter().flat_map(|s| {
        s.secure_link
            .iter()
            .chain(s.location.iter().filter_map(|l| l.secure_link.as_ref()))
    });
    for sl in top.chain(servers) {
        validate_one(sl, known)?;
    }
    Ok(())
}

fn validate_one(sl: &Spanned<SecureLinkCfg>, known: &Known) -> Result<(), VErr> {
    let cfg = sl.get_ref();
    let at = |s: &Spanned<String>| {
        if s.span().end > 0 {
            s.span()
        } else {
            sl.span()
        }
    };
    check_arg_name(&cfg.expires_arg, "secure_link.expires_arg").map_err(|e| VErr {
        span: Some(at(&cfg.expires_arg)),
        ..e
    })?;
    check_arg_name(&cfg.signature_arg, "secure_link.signature_arg").map_err(|e| VErr {
        span: Some(at(&cfg.signature_arg)),
        ..e
    })?;
    if cfg.expires_arg.get_ref() == cfg.signature_arg.get_ref() {
        return err(
            Some(at(&cfg.signature_arg)),
            "secure_link.signature_arg",
            format!(
                "{:?} is also expires_arg: the two arguments need different names",
                cfg.signature_arg.get_ref()
            ),
        );
    }
    let include_span = if cfg.include.span().end > 0 {
        cfg.include.span()
    } else {
        sl.span()
    };
    let n = cfg.include.get_ref().len();
    if n == 0 || n > MAX_INCLUDE {
        return err(
            Some(include_span),
            "secure_link.include",
            format!("list 1 to {MAX_INCLUDE} templates (such as [\"$uri\"]): a signature must cover what it grants"),
        );
    }
    include_templates(cfg, known).map_err(|m| VErr {
        span: Some(include_span),
        key: "secure_link.include".into(),
        message: m,
    })?;
    let files = &cfg.secret_file.get_ref().0;
    if files.is_empty() || files.len() > MAX_SECRETS {
        return Err(verr(
            &cfg.secret_file,
            "secure_link.secret_file",
            format!(
                "list at least one file and at most {MAX_SECRETS} (the first signs, all verify)"
            ),
        ));
    }
    if let Some(p) = files.iter().find(|p| p.as_os_str().is_empty()) {
        return Err(verr(
            &cfg.secret_file,
            "secure_link.secret_file",
            format!("{p:?} is not a path"),
        ));
    }
    Ok(())
}

/// Reads every secret file a server or location names (each path once per load), relative paths
/// under `dir` (the config file's directory; None: the working directory), into its
/// [`SecureLinkCfg::secrets`].
pub(super) fn load_secrets(cfg: &mut super::Config, dir: Option<&Path>) -> Result<(), VErr> {
    let mut read: HashMap<PathBuf, Arc<[u8]>> = HashMap::new();
    // A server's own setting too, so that `-t` checks it with no location under it.
    let mut links: Vec<&mut Spanned<SecureLinkCfg>> = cfg
        .location
        .iter_mut()
        .filter_map(|l| l.secure_link.as_mut())
        .collect();
    for s in &mut cfg.server {
        links.extend(s.secure_link.as_mut());
        links.extend(s.location.iter_mut().filter_map(|l| l.secure_link.as_mut()));
    }
    for sl in links {
        let span = sl.span();
        let sl = sl.get_mut();
        let mut secrets = Vec::with_capacity(sl.secret_file.get_ref().0.len());
        for p in &sl.secret_file.get_ref().0 {
            let path = match dir {
                Some(d) if p.is_relative() => d.join(p),
                _ => p.clone(),
            };
            if let Some(s) = read.get(&path) {
                secrets.push(s.clone());
                continue;
            }
            let bytes: Arc<[u8]> = read_secret(&path)
                .map_err(|m| VErr {
                    span: Some(sl.secret_file.span())
                        .filter(|s| s.end > 0)
                        .or(Some(span.clone())),
                    key: "secure_link.secret_file".into(),
                    message: m,
                })?
                .into();
            read.insert(path, bytes.clone());
            secrets.push(bytes);
        }
        sl.secrets = Secrets(secrets);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{parse_in, ConfigError};
    use std::path::Path;

    const HEAD: &str = "[[listen]]\naddr = \"127.0.0.1:8080\"\n";

    fn cfg(location_extra: &str) -> String {
        format!("{HEAD}[[location]]\nprefix = \"/\"\nempty_gif = true\n{location_extra}\n")
    }

    fn parse(dir: &Path, text: &str) -> Result<super::super::Config, ConfigError> {
        parse_in("t.toml", text, Some(dir))
    }

    fn err(dir: &Path, text: &str) -> ConfigError {
        parse(dir, text).expect_err("config should be rejected")
    }

    #[test]
    fn secrets_are_read_relative_to_the_config_with_one_newline_stripped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("new.key"), "s3cret\n").unwrap();
        std::fs::write(d.path().join("old.key"), "old\r\n").unwrap();
        std::fs::write(d.path().join("two.key"), "two\n\n").unwrap();
        let abs = d.path().join("two.key");
        let text = cfg(&format!(
            "secure_link = {{ secret_file = [\"new.key\", \"old.key\", {:?}] }}",
            abs.display().to_string()
        ));
        let c = parse(d.path(), &text).unwrap();
        let sl = c.location[0].secure_link.as_ref().unwrap().get_ref();
        let got: Vec<&[u8]> = sl.secrets.0.iter().map(|s| &s[..]).collect();
        assert_eq!(got, [&b"s3cret"[..], b"old", b"two\n"]);
        assert_eq!(sl.expires_arg.get_ref(), "expires");
        assert_eq!(sl.signature_arg.get_ref(), "sig");
        assert_eq!(sl.include.get_ref(), &["$uri".to_string()]);
        assert!(!format!("{sl:?}").contains("s3cret"), "Debug hides secrets");
        // One string is one file.
        let one = cfg("secure_link = { secret_file = \"new.key\" }");
        let c = parse(d.path(), &one).unwrap();
        let sl = c.location[0].secure_link.as_ref().unwrap().get_ref();
        assert_eq!(sl.secrets.0.len(), 1);
    }

    #[test]
    fn a_missing_empty_or_odd_secret_file_is_a_located_error() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("empty.key"), "\n").unwrap();
        std::fs::write(d.path().join("big.key"), vec![b'x'; 5000]).unwrap();
        std::fs::create_dir(d.path().join("dir.key")).unwrap();
        for (file, says) in [
            ("nope.key", "cannot read"),
            ("empty.key", "is empty"),
            ("big.key", "longer than 4096 bytes"),
            ("dir.key", "not a regular file"),
        ] {
            let text = cfg(&format!("secure_link = {{ secret_file = {file:?} }}"));
            let e = err(d.path(), &text);
            assert_eq!(e.key, "secure_link.secret_file", "{e}");
            assert_eq!(e.line, 6, "{e}");
            assert!(e.message.contains(says), "{file}: {e}");
            assert!(e.message.contains(file), "names the file: {e}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("k"), "k").unwrap();
        let nine: Vec<String> = (0..9).map(|_| "\"k\"".to_string()).collect();
        for (extra, key, says) in [
            (
                "secret_file = []",
                "secure_link.secret_file",
                "at least one",
            ),
            (
                &format!("secret_file = [{}]", nine.join(",")) as &str,
                "secure_link.secret_file",
                "at most 8",
            ),
            (
                "secret_file = \"k\", expires_arg = \"a&b\"",
                "secure_link.expires_arg",
                "not a query argument name",
            ),
            (
                "secret_file = \"k\", signature_arg = \"\"",
                "secure_link.signature_arg",
                "not a query argument name",
            ),
            (
                "secret_file = \"k\", signature_arg = \"expires\"",
                "secure_link.signature_arg",
                "different names",
            ),
            (
                "secret_file = \"k\", include = []",
                "secure_link.include",
                "1 to 16",
            ),
            (
                "secret_file = \"k\", include = [\"$uri\", \"$nope\"]",
                "secure_link.include",
                "unknown variable",
            ),
            (
                "secret_file = \"k\", include = [\"$uri$status\"]",
                "secure_link.include",
                "access-log variable",
            ),
            (
                "secret_file = \"k\", ttl = 5",
                "ttl",
                "expected one of `secret_file`",
            ),
            ("expires_arg = \"e\"", "secure_link", "secret_file"),
        ] {
            let text = cfg(&format!("secure_link = {{ {extra} }}"));
            let e = err(d.path(), &text);
            assert!(e.key.contains(key), "{extra}: {e}");
            assert!(e.message.contains(says), "{extra}: {e}");
            assert_eq!(e.line, 6, "{extra}: {e}");
        }
    }

    #[test]
    fn a_server_s_secure_link_goes_to_locations_that_set_none() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "a").unwrap();
        std::fs::write(d.path().join("b"), "b").unwrap();
        let text = format!(
            "{HEAD}[[server]]\nnames = [\"x\"]\nsecure_link = {{ secret_file = \"a\" }}\n\
             [[server.location]]\nprefix = \"/\"\nempty_gif = true\n\
             [[server.location]]\nprefix = \"/b\"\nempty_gif = true\n\
             secure_link = {{ secret_file = \"b\", expires_arg = \"e\" }}\n"
        );
        let c = parse(d.path(), &text).unwrap();
        let locs = &c.server[0].location;
        let sl = |i: usize| locs[i].secure_link.as_ref().unwrap().get_ref();
        assert_eq!(&sl(0).secrets.0[0][..], b"a");
        assert_eq!(&sl(1).secrets.0[0][..], b"b");
        assert_eq!(sl(1).expires_arg.get_ref(), "e");
        // A server without locations still has its secure_link checked.
        let bare = format!(
            "{HEAD}[[server]]\nnames = [\"x\"]\nsecure_link = {{ secret_file = \"gone\" }}\n"
        );
        assert_eq!(err(d.path(), &bare).key, "secure_link.secret_file");
        let bare = bare.replace("\"gone\" }", "\"a\", expires_arg = \"\" }");
        assert_eq!(err(d.path(), &bare).key, "secure_link.expires_arg");
        // A server's missing file is reported at the server's line.
        let text = text.replace("secret_file = \"a\"", "secret_file = \"gone\"");
        let e = err(d.path(), &text);
        assert_eq!(
            (e.key.as_str(), e.line),
            ("secure_link.secret_file", 5),
            "{e}"
        );
    }
}
