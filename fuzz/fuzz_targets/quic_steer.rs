//! Fuzzes the QUIC steering decision (`edge_core::quic::cid`): which worker a received
//! datagram belongs to, read from its destination connection ID before quinn sees it.
//! The first two bytes pick the worker count and the process's secret byte; the rest
//! is the datagram. Invariants: no panic; a datagram is steered only to a worker that
//! exists, and only when its destination CID is ours (the layout bits, our length, a
//! worker byte that names a worker); the decision reads only the header (bytes after
//! the CID do not change it); a short-header datagram carrying a CID our generator made
//! for worker w is steered to w.
#![no_main]

use edge_core::quic::cid::{Layout, CID_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&[w, secret], datagram)) = data.split_first_chunk::<2>() else { return };
    let workers = usize::from(w) + 1;
    let layout = Layout::with_secret(workers, secret);
    let steered = layout.steer(datagram);
    if let Some(to) = steered {
        assert!(to < workers);
        // The CID it read: after the flags byte (short header), or after the length
        // byte of a long header, which must give our length.
        let cid = if datagram[0] & 0x80 == 0 {
            &datagram[1..1 + CID_LEN]
        } else {
            assert_eq!(usize::from(datagram[5]), CID_LEN);
            &datagram[6..6 + CID_LEN]
        };
        assert_eq!(layout.worker_of_cid(cid), Some(to));
        // Only the header decides.
        let header = if datagram[0] & 0x80 == 0 { 1 + CID_LEN } else { 6 + CID_LEN };
        assert_eq!(layout.steer(&datagram[..header]), Some(to));
    }
    // A CID made from the datagram's bytes by the layout names its worker.
    if datagram.len() >= CID_LEN {
        let mut random = [0u8; CID_LEN];
        random.copy_from_slice(&datagram[..CID_LEN]);
        let worker = usize::from(random[1]) % workers;
        let cid = layout.cid_for(worker, random);
        assert_eq!(layout.worker_of_cid(&cid), Some(worker));
        let mut short = vec![0x40];
        short.extend_from_slice(&cid);
        short.extend_from_slice(datagram);
        assert_eq!(layout.steer(&short), Some(worker));
    }
});
