//! Throughput and ratio of every coding and level on edgeorigin's `/txt/` text (the
//! object `edgebench compress` serves), one core: `cargo bench -p edge-compress`.
//! Numbers from this machine are in docs/compression.md.

use edge_compress::{Coding, Encoder, Levels};
use std::time::Instant;

fn text(size: u64) -> Vec<u8> {
    let mut out = vec![0u8; size as usize];
    edgeorigin::content::fill(edgeorigin::content::Kind::Txt, size, 1, 0, &mut out);
    out
}

fn run(c: Coding, levels: &Levels, data: &[u8]) -> (f64, f64) {
    let once = |data: &[u8]| {
        let mut e = Encoder::new(c, levels).unwrap();
        let mut out = Vec::with_capacity(data.len());
        for chunk in data.chunks(64 * 1024) {
            e.write(chunk, &mut out).unwrap();
        }
        e.finish(&mut out).unwrap();
        out.len()
    };
    let n = once(data);
    // About a second per cell at 50 MB/s.
    let iters = (50_000_000 / data.len()).max(2);
    let t = Instant::now();
    let mut k = 0;
    while k < iters && t.elapsed().as_secs_f64() < 3.0 {
        once(data);
        k += 1;
    }
    let mbs = (data.len() * k) as f64 / t.elapsed().as_secs_f64() / 1e6;
    (mbs, data.len() as f64 / n as f64)
}

fn main() {
    println!("| object | coding | level | MB/s (one core) | ratio |");
    println!("|---|---|---|---|---|");
    for size in [10u64 << 10, 100 << 10, 1 << 20] {
        let data = text(size);
        let cells: &[(Coding, &[i64])] = &[
            (Coding::Gzip, &[1, 4, 6, 9]),
            (Coding::Br, &[1, 4, 5, 6]),
            (Coding::Zstd, &[1, 3, 6]),
        ];
        for (c, levels) in cells {
            for &l in *levels {
                let mut lv = Levels::default();
                match c {
                    Coding::Gzip => lv.gzip = l as u32,
                    Coding::Br => lv.brotli = l as u32,
                    Coding::Zstd => lv.zstd = l as i32,
                }
                let (mbs, ratio) = run(*c, &lv, &data);
                println!(
                    "| {} KiB | {} | {l} | {mbs:.0} | {ratio:.2} |",
                    size >> 10,
                    c.token()
                );
            }
        }
    }
}
