//! Micro benchmarks of the origin's hot paths: content generation, checksums, and what
//! a body-cache miss costs. Run: `cargo bench -p edgeorigin` (prints MB/s and µs; the
//! machine is shared, so compare numbers from one run only).

use std::hint::black_box;
use std::time::Instant;

fn time<F: FnMut()>(name: &str, bytes: usize, iters: u32, mut f: F) {
    f(); // warm up
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let per = t.elapsed() / iters;
    let mbps = bytes as f64 / per.as_secs_f64() / 1e6;
    println!(
        "{name:<44} {:>9.1} µs/op {mbps:>9.0} MB/s",
        per.as_secs_f64() * 1e6
    );
}

fn main() {
    const MIB: usize = 1 << 20;
    let mut buf = vec![0u8; MIB];
    time("object_bytes 1 MiB (reused buffer)", MIB, 200, || {
        edgeorigin::object_bytes(MIB as u64, 1, 0, black_box(&mut buf))
    });
    time("text_bytes 1 MiB (reused buffer)", MIB, 200, || {
        edgeorigin::text_bytes(MIB as u64, 1, 0, black_box(&mut buf))
    });
    time("object_bytes 1 KiB", 1024, 100_000, || {
        edgeorigin::object_bytes(1024, 1, 0, black_box(&mut buf[..1024]))
    });
    time("xxh3 1 MiB", MIB, 200, || {
        black_box(twox_hash::XxHash3_64::oneshot(black_box(&buf)));
    });
    let mut id = 0u64;
    time("checksum 1 MiB, new id each time", MIB, 100, || {
        id += 1;
        black_box(edgeorigin::checksum(MIB as u64, black_box(id)));
    });
    time("memfd create + write 1 MiB + close", MIB, 100, || {
        use std::io::Write;
        use std::os::fd::FromRawFd;
        // SAFETY: static NUL-terminated name; a new fd or -1 is returned.
        let fd = unsafe { libc::memfd_create(c"bench".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` is new and owned only here.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.write_all(&buf).unwrap();
        black_box(f);
    });
    {
        use std::os::fd::FromRawFd;
        use std::os::unix::fs::FileExt;
        // SAFETY: as above.
        let fd = unsafe { libc::memfd_create(c"bench".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: as above.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        time("memfd reused: pwrite 1 MiB", MIB, 100, || {
            f.write_all_at(&buf, 0).unwrap()
        });
    }
    time("fresh Vec 1 MiB + generate", MIB, 100, || {
        let mut v = vec![0u8; MIB];
        edgeorigin::object_bytes(MIB as u64, 1, 0, &mut v);
        black_box(v);
    });
}
