//! Connection IDs that name the worker owning their connection, and the steering
//! decision on a received datagram (`docs/http3.md`).
//!
//! Our CIDs are [`CID_LEN`] bytes: byte 0 carries the layout in its top two bits
//! ([`LAYOUT`]) and six random bits; byte 1 is the worker's index XOR a secret byte
//! chosen at start (the same for every worker of the process); bytes 2..16 are random.
//! The secret hides the index from observers (RFC 9000 5.1: CIDs must not be
//! linkable); the worker byte is shared by 1/N of all connections, so it groups no
//! connection more than the 4-tuple hash already does.
//!
//! Bytes 8..16 of a CID a worker issues are a tag: the first 8 bytes of
//! HMAC-SHA256(process key, bytes 0..8), so the process can tell, statelessly, a CID
//! it issued itself from one it did not ([`WorkerCids::validate`]): a datagram for a
//! CID of its own that quinn no longer routes (retired, or its connection closed) is a
//! straggler and is dropped, never answered with a stateless reset (which would end a
//! live connection whose peer still honours the retired CID's token).
//!
//! [`Layout::steer`] reads a datagram's destination CID: a short-header packet (the
//! bulk of the traffic) carries ours right after its first byte; a long-header one
//! names its length. A CID that is not of our layout, or names no worker, is not
//! steered: the datagram stays where the kernel put it (a client's first Initials
//! carry a CID the client chose, and the kernel's hash keeps them on one worker).

use quinn::{ConnectionId, ConnectionIdGenerator};

/// Length of the CIDs we issue.
pub const CID_LEN: usize = 16;
/// The layout bits (top two of byte 0) of our CIDs.
const LAYOUT: u8 = 0b01 << 6;
const LAYOUT_MASK: u8 = 0b11 << 6;
/// Most workers a CID can name.
pub const MAX_WORKERS: usize = 256;

/// The process's CID layout: its secret byte and its number of workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    secret: u8,
    workers: usize,
}

impl Layout {
    /// The layout of a process with `workers` workers (at most [`MAX_WORKERS`]: the
    /// rest share the last index's steering) and a random secret.
    pub fn new(workers: usize) -> Layout {
        use ring::rand::SecureRandom;
        let mut b = [0u8; 1];
        let _ = ring::rand::SystemRandom::new().fill(&mut b);
        Layout::with_secret(workers, b[0])
    }

    /// The layout with a given secret (tests and the fuzz target).
    pub fn with_secret(workers: usize, secret: u8) -> Layout {
        Layout {
            secret,
            workers: workers.clamp(1, MAX_WORKERS),
        }
    }

    /// The secret byte the worker index is XORed with.
    pub fn secret(&self) -> u8 {
        self.secret
    }

    /// The workers a CID can name.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The worker a CID of ours names (None: not ours).
    pub fn worker_of_cid(&self, cid: &[u8]) -> Option<usize> {
        if cid.len() != CID_LEN || cid[0] & LAYOUT_MASK != LAYOUT {
            return None;
        }
        let w = usize::from(cid[1] ^ self.secret);
        (w < self.workers).then_some(w)
    }

    /// The worker a datagram's destination CID names, if it is one of ours.
    pub fn steer(&self, datagram: &[u8]) -> Option<usize> {
        let first = *datagram.first()?;
        if first & 0x80 == 0 {
            // Short header: flags, then the destination CID (its length is ours).
            return self.worker_of_cid(datagram.get(1..1 + CID_LEN)?);
        }
        // Long header: flags, version (4), DCID length, DCID.
        let len = usize::from(*datagram.get(5)?);
        if len != CID_LEN {
            return None;
        }
        self.worker_of_cid(datagram.get(6..6 + len)?)
    }

    /// A new CID for worker `worker`, its random bytes from `random`.
    pub fn cid_for(&self, worker: usize, mut random: [u8; CID_LEN]) -> [u8; CID_LEN] {
        random[0] = LAYOUT | (random[0] & !LAYOUT_MASK);
        random[1] = (worker.min(self.workers - 1) as u8) ^ self.secret;
        random
    }
}

/// Where the tag starts in a CID we issue (see the module doc).
const TAG_AT: usize = 8;

/// quinn's generator of a worker's CIDs.
pub struct WorkerCids {
    layout: Layout,
    worker: usize,
    rng: ring::rand::SystemRandom,
    /// The process's key for the tag (the same for every worker).
    tag_key: std::sync::Arc<ring::hmac::Key>,
}

impl WorkerCids {
    pub fn new(
        layout: Layout,
        worker: usize,
        tag_key: std::sync::Arc<ring::hmac::Key>,
    ) -> WorkerCids {
        WorkerCids {
            layout,
            worker,
            rng: ring::rand::SystemRandom::new(),
            tag_key,
        }
    }

    /// The tag of `cid`'s first [`TAG_AT`] bytes.
    fn tag(&self, cid: &[u8]) -> [u8; CID_LEN - TAG_AT] {
        let mac = ring::hmac::sign(&self.tag_key, &cid[..TAG_AT]);
        let mut t = [0u8; CID_LEN - TAG_AT];
        t.copy_from_slice(&mac.as_ref()[..CID_LEN - TAG_AT]);
        t
    }

    /// Whether this process issued `cid` (a CID of our layout whose tag is right). A
    /// plain comparison: what a forged tag buys (its sender's datagrams dropped instead
    /// of answered with a reset) is not worth a timing attack's effort to guard.
    pub fn issued_here(&self, cid: &[u8]) -> bool {
        self.layout.worker_of_cid(cid).is_some() && cid[TAG_AT..] == self.tag(cid)
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        use ring::rand::SecureRandom;
        let mut random = [0u8; CID_LEN];
        // getrandom(2) does not fail once the pool is initialised (it was, for the
        // process's keys); were it to, the CID still names the worker.
        let _ = self.rng.fill(&mut random);
        let mut cid = self.layout.cid_for(self.worker, random);
        let tag = self.tag(&cid);
        cid[TAG_AT..].copy_from_slice(&tag);
        ConnectionId::new(&cid)
    }

    /// quinn asks this only of a datagram it cannot route to a connection, to choose
    /// between dropping it (`Err`) and answering with a stateless reset (`Ok`). Not of
    /// our layout: dropped. Issued by this process: also dropped. quinn routes every
    /// CID a live connection of ours may use, so the datagram is a straggler for a CID
    /// that was just retired (the peer moved to a new one, e.g. after a migration,
    /// while datagrams it sent earlier were still queued: one worker's socket and the
    /// hand-off from another are read in turn, so they can be taken out of order) or
    /// whose connection closed; a reset would end a live connection whose peer still
    /// honours the retired CID's reset token (ngtcp2, hence curl, does), and a closed
    /// one needs none. Of our layout with another tag: issued by an earlier process,
    /// whose connections are gone, so the peer is told at once with a reset.
    fn validate(&self, cid: &ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        match self.layout.worker_of_cid(cid) {
            Some(_) if !self.issued_here(cid) => Ok(()),
            _ => Err(quinn_proto::InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> std::sync::Arc<ring::hmac::Key> {
        std::sync::Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[b; 32]))
    }

    #[test]
    fn every_cid_names_its_worker_and_carries_its_tag() {
        for workers in [1, 2, 16, 256, 1000] {
            let layout = Layout::new(workers);
            for w in [0, workers.min(MAX_WORKERS) - 1, workers / 2] {
                let mut g = WorkerCids::new(layout, w, key(1));
                let cid = g.generate_cid();
                assert_eq!(cid.len(), CID_LEN);
                assert_eq!(layout.worker_of_cid(&cid), Some(w.min(MAX_WORKERS - 1)));
                assert!(g.issued_here(&cid));
                // Short header: flags then the CID; long header: flags, version,
                // length, CID.
                let mut short = vec![0x40];
                short.extend_from_slice(&cid);
                short.extend_from_slice(&[0u8; 20]);
                assert_eq!(layout.steer(&short), Some(w.min(MAX_WORKERS - 1)));
                let mut long = vec![0xc0, 0, 0, 0, 1, CID_LEN as u8];
                long.extend_from_slice(&cid);
                long.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
                assert_eq!(layout.steer(&long), Some(w.min(MAX_WORKERS - 1)));
            }
        }
    }

    #[test]
    fn cids_differ_and_hide_the_worker_index() {
        let layout = Layout::with_secret(4, 0x5a);
        let mut g = WorkerCids::new(layout, 3, key(1));
        let a = g.generate_cid();
        let b = g.generate_cid();
        assert_ne!(a, b);
        assert_ne!(a[TAG_AT..], b[TAG_AT..]);
        assert_eq!(a[1], 3 ^ 0x5a);
        assert_eq!(a[0] & LAYOUT_MASK, LAYOUT);
    }

    #[test]
    fn foreign_and_short_datagrams_are_not_steered() {
        let layout = Layout::with_secret(2, 0);
        // Worker byte past the worker count.
        let mut cid = [0u8; CID_LEN];
        cid[0] = LAYOUT;
        cid[1] = 7;
        assert_eq!(layout.worker_of_cid(&cid), None);
        // Another layout.
        cid[1] = 1;
        cid[0] = 0;
        assert_eq!(layout.worker_of_cid(&cid), None);
        cid[0] = LAYOUT;
        assert_eq!(layout.worker_of_cid(&cid), Some(1));
        // A client's own 8-byte Initial CID.
        let initial = [0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
        assert_eq!(layout.steer(&initial), None);
        // Truncated datagrams.
        for d in [
            &[][..],
            &[0x40, LAYOUT, 1][..],
            &[0xc0, 0, 0, 0, 1, 16, LAYOUT][..],
        ] {
            assert_eq!(layout.steer(d), None);
        }
        let g = WorkerCids::new(layout, 0, key(1));
        assert!(g.validate(&ConnectionId::new(&[1, 2, 3])).is_err());
    }

    /// What quinn does with a datagram it cannot route: a CID this process issued (any
    /// worker's: they share the key) is dropped, never reset; one of our layout that
    /// another process issued (another key, e.g. before a restart) gets a reset; one
    /// altered in its random part or its tag no longer passes as ours.
    #[test]
    fn unroutable_cids_of_this_process_are_dropped_and_others_reset() {
        let layout = Layout::with_secret(2, 0x11);
        let mut w0 = WorkerCids::new(layout, 0, key(1));
        let w1 = WorkerCids::new(layout, 1, key(1));
        let mut earlier = WorkerCids::new(layout, 1, key(2));
        for _ in 0..100 {
            let ours = w0.generate_cid();
            assert!(w0.validate(&ours).is_err(), "ours: dropped");
            assert!(w1.validate(&ours).is_err(), "another worker's: dropped too");
            let before = earlier.generate_cid();
            assert!(!w1.issued_here(&before));
            assert!(w1.validate(&before).is_ok(), "an earlier process's: reset");
            for at in [2, TAG_AT + 3] {
                let mut bent = ours.to_vec();
                bent[at] ^= 1;
                assert!(w0.validate(&ConnectionId::new(&bent)).is_ok(), "byte {at}");
            }
        }
    }
}
