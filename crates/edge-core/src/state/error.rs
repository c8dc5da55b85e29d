//! The state layer's error.

use crate::config::validate::BadValue;

/// Why a validated config could not be compiled (or its caches opened).
#[derive(Debug)]
pub enum StateError {
    /// A value that does not parse (an address, an `allow` prefix, `levels`).
    BadValue(BadValue),
    /// A location names an upstream that does not exist.
    UnknownUpstream(String),
    /// A location names a cache that is not open.
    CacheNotOpen(String),
    /// A location with neither `prefix` nor `exact`.
    LocationWithoutMatch,
    /// A TLS certificate or key of a listener (or CA file of an upstream) cannot be
    /// used: read again at each reload, it may have changed since `-t`.
    Tls(String),
    /// An access log cannot be compiled or its file opened.
    AccessLog(String),
    /// A cache zone's directory cannot be opened or created.
    CacheOpen {
        name: String,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::BadValue(b) => write!(f, "{b}"),
            StateError::UnknownUpstream(n) => write!(f, "no upstream {n:?}"),
            StateError::CacheNotOpen(n) => write!(f, "cache {n:?} is not open"),
            StateError::LocationWithoutMatch => f.write_str("location without prefix or exact"),
            StateError::Tls(m) => f.write_str(m),
            StateError::AccessLog(m) => write!(f, "access_log: {m}"),
            StateError::CacheOpen { name, path, source } => {
                write!(f, "cache \"{name}\" at {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for StateError {}

impl From<crate::access::cidr::CidrError> for StateError {
    fn from(e: crate::access::cidr::CidrError) -> Self {
        StateError::BadValue(BadValue(e.0))
    }
}

impl From<BadValue> for StateError {
    fn from(b: BadValue) -> Self {
        StateError::BadValue(b)
    }
}
