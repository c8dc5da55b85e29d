//! The kinds of server an experiment runs: edgecache and its peers, their programs and
//! Debian packages.
//!
//! How it fits: experiments name a kind per row ([`crate::experiment`]); the
//! [`crate::servers`] module prepares and starts each one. Its own module so that the
//! experiment's types and the servers depend on it, not on each other.

use serde::{Deserialize, Serialize};

/// A kind of server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerKind {
    Edgecache,
    Nginx,
    Varnish,
    Ats,
}

impl ServerKind {
    /// Every peer kind, in report order.
    pub const PEERS: [ServerKind; 3] = [ServerKind::Nginx, ServerKind::Varnish, ServerKind::Ats];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Edgecache => "edgecache",
            ServerKind::Nginx => "nginx",
            ServerKind::Varnish => "varnish",
            ServerKind::Ats => "ats",
        }
    }

    /// `--peers` names.
    pub fn parse(s: &str) -> std::result::Result<ServerKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "edgecache" => Ok(ServerKind::Edgecache),
            "nginx" => Ok(ServerKind::Nginx),
            "varnish" => Ok(ServerKind::Varnish),
            "ats" | "trafficserver" => Ok(ServerKind::Ats),
            other => Err(format!(
                "unknown peer {other:?} (expected nginx, varnish, ats)"
            )),
        }
    }

    /// The program started.
    pub fn program(self) -> &'static str {
        match self {
            ServerKind::Edgecache => "edgecache",
            ServerKind::Nginx => "nginx",
            ServerKind::Varnish => "varnishd",
            ServerKind::Ats => "traffic_server",
        }
    }

    /// The Debian package that provides it (peers only).
    pub fn package(self) -> Option<&'static str> {
        match self {
            ServerKind::Edgecache => None,
            ServerKind::Nginx => Some("nginx"),
            ServerKind::Varnish => Some("varnish"),
            ServerKind::Ats => Some("trafficserver"),
        }
    }
}
