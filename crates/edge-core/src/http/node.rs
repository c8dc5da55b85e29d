//! This node's identity in messages: its name in `Cache-Status` (RFC 9211) and the
//! `Via` entry it adds to requests it forwards (RFC 9110 7.6.3), whose comment carries
//! an id that lets a node refuse a request that already passed through it (a routing
//! loop between tiers).
//!
//! Set once at start (`node_name`, default `edgecache`; the id from the host name, the
//! name and the listening addresses, so it is stable across restarts and differs between
//! nodes on one host); a reload does not change it.

use std::sync::OnceLock;

/// The name of a node that was never named.
pub const DEFAULT_NAME: &str = "edgecache";

#[derive(Debug)]
pub struct Node {
    pub name: String,
    /// `node=<16 hex digits>`: what `Via` carries and loop detection looks for.
    pub id: String,
    /// Our `Via` entry, `1.1 <name> (edgecache node=<id>)`.
    pub via: Vec<u8>,
}

static NODE: OnceLock<Node> = OnceLock::new();

/// Sets this node's identity (once; later calls are ignored).
pub fn set(name: &str, seed: &str) {
    let h = twox_hash::XxHash3_64::oneshot(format!("{name}\0{seed}").as_bytes());
    let id = format!("node={h:016x}");
    let via = format!("1.1 {name} (edgecache {id})").into_bytes();
    let _ = NODE.set(Node {
        name: name.to_string(),
        id,
        via,
    });
}

/// This node (the default identity if [`set`] was never called: tests, tools).
pub fn get() -> &'static Node {
    NODE.get_or_init(|| {
        let id = "node=0000000000000000".to_string();
        Node {
            name: DEFAULT_NAME.to_string(),
            via: format!("1.1 {DEFAULT_NAME} (edgecache {id})").into_bytes(),
            id,
        }
    })
}

/// Whether `Via` field values show that a request already passed through this node.
pub fn looped<'a>(via: impl IntoIterator<Item = &'a [u8]>) -> bool {
    let id = get().id.as_bytes();
    via.into_iter()
        .any(|v| v.windows(id.len()).any(|w| w == id))
}

/// The host's name (for the node id), or empty.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_via_with_our_id_is_a_loop() {
        let me = get();
        let mine = String::from_utf8(me.via.clone()).unwrap();
        assert!(looped([mine.as_bytes()]));
        assert!(looped([
            &b"1.1 other"[..],
            format!("1.0 a, {mine}").as_bytes()
        ]));
        assert!(!looped([
            &b"1.1 edgecache (edgecache node=1234567812345678)"[..]
        ]));
        assert!(!looped(std::iter::empty()));
    }
}
