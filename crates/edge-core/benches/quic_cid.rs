//! QUIC connection-ID micro benchmark: `cargo bench -p edge-core --bench quic_cid`.
//!
//! What a CID costs a new connection (quinn asks the generator for one at `accept` and
//! one for every `NEW_CONNECTION_ID` it sends, a handful per connection), and what
//! `validate` costs a datagram quinn cannot route (the choice between a drop and a
//! stateless reset): our tagged CIDs (`WorkerCids`: layout, worker byte, random bytes
//! from the system's CSPRNG, HMAC-SHA256 tag) against the same CID without its tag
//! (`Layout::cid_for` over the same random bytes), in one run.
//!
//! Numbers are ns of this thread's CPU time per call, the best of 5 runs of 200,000.

use edge_core::quic::cid::{Layout, WorkerCids};
use quinn::ConnectionIdGenerator;
use std::hint::black_box;

const CALLS: u32 = 200_000;

fn cpu_now() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The best of 5 runs of `CALLS` calls of `f`, in ns per call.
fn best(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = cpu_now();
            for _ in 0..CALLS {
                f();
            }
            (cpu_now() - t).as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let layout = Layout::new(16);
    let key = std::sync::Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[7; 32]));
    let mut tagged = WorkerCids::new(layout, 3, key.clone());
    let rng = ring::rand::SystemRandom::new();
    let untagged = best(|| {
        use ring::rand::SecureRandom;
        let mut random = [0u8; edge_core::quic::cid::CID_LEN];
        let _ = rng.fill(&mut random);
        black_box(layout.cid_for(3, random));
    });
    let with_tag = best(|| {
        black_box(tagged.generate_cid());
    });
    let ours = tagged.generate_cid();
    let other = WorkerCids::new(
        layout,
        3,
        std::sync::Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[8; 32])),
    )
    .generate_cid();
    let validate_ours = best(|| {
        black_box(tagged.validate(black_box(&ours)).is_err());
    });
    let validate_other = best(|| {
        black_box(tagged.validate(black_box(&other)).is_ok());
    });
    println!("generate a CID, untagged (random bytes, layout): {untagged:.0} ns");
    println!(
        "generate a CID, tagged (+ HMAC-SHA256):          {with_tag:.0} ns ({:.2}x)",
        with_tag / untagged
    );
    println!("validate an unroutable CID of this process:      {validate_ours:.0} ns");
    println!("validate an unroutable CID of another process:   {validate_other:.0} ns");
}
