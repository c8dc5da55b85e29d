//! A zone's key: a template rendered per request (or per connection) and hashed with
//! xxh3 under a per-process random seed, so that nobody outside can choose keys that
//! collide in a table.

use crate::vars::{Ctx, Known, Piece, Template, Var};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::OnceLock;

/// A compiled `key`.
#[derive(Debug, Clone)]
pub struct Key {
    template: Template,
    /// Every variable it reads is a fact of the connection (`$remote_addr`,
    /// `$binary_remote_addr`, `$server_port`, `$scheme`): it can be rendered when a
    /// connection is accepted, before any request.
    conn_only: bool,
    /// It is `$binary_remote_addr` alone (the usual key): hashed from the address
    /// with no template rendered ([`Key::hash_addr`], the same bytes).
    addr_only: bool,
}

/// Whether a variable is known when a connection is accepted.
fn of_connection(v: &Var) -> bool {
    matches!(
        v,
        Var::RemoteAddr | Var::BinaryRemoteAddr | Var::ServerPort | Var::Scheme
    )
}

impl Key {
    pub fn compile(src: &str, known: &Known) -> Result<Key, String> {
        let template = Template::compile(src, known).map_err(|e| e.to_string())?;
        let conn_only = template.vars().all(of_connection);
        let addr_only = {
            let mut pieces = template.pieces();
            matches!(
                (pieces.next(), pieces.next()),
                (Some(Piece::Var(Var::BinaryRemoteAddr)), None)
            )
        };
        Ok(Key {
            template,
            conn_only,
            addr_only,
        })
    }

    /// Whether the key is `$binary_remote_addr` alone: [`Key::hash_addr`] of the
    /// client's address is its hash.
    pub fn addr_only(&self) -> bool {
        self.addr_only
    }

    /// The hash `$binary_remote_addr` renders to for `ip`: its 4 or 16 bytes (an
    /// IPv4-mapped IPv6 address as IPv4, as the variable writes it).
    #[inline]
    pub fn hash_addr(ip: IpAddr) -> u64 {
        match ip {
            IpAddr::V4(a) => hash_bytes(&a.octets()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => hash_bytes(&v4.octets()),
                None => hash_bytes(&a.octets()),
            },
        }
    }

    /// See [`Key::conn_only`](Key#structfield.conn_only).
    pub fn conn_only(&self) -> bool {
        self.conn_only
    }

    /// The key's hash for `ctx`, rendered into `buf` (cleared first); None when it
    /// renders empty: the request is not limited by this zone (as in nginx).
    #[inline]
    pub fn hash(&self, ctx: &Ctx<'_>, buf: &mut Vec<u8>) -> Option<u64> {
        buf.clear();
        self.template.render(ctx, buf);
        (!buf.is_empty()).then(|| hash_bytes(buf))
    }
}

/// xxh3 of `bytes` under this process's seed.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot_with_seed(seed(), bytes)
}

/// A random seed, drawn once per process (from the OS, through std's `RandomState`).
fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64))
}
