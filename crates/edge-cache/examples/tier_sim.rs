//! Hit ratios of the RAM tier's policies on the simulated workloads of
//! `docs/results/tiers.md`: `cargo run --release -p edge-cache --example tier_sim`.

use edge_cache::local::sim::{budget_for, simulate, workloads};
use edge_cache::local::Policy;

fn main() {
    println!("| workload | policy | hit ratio | byte hit ratio | hottest 100 held before / after the scan |");
    println!("|---|---|---|---|---|");
    for w in workloads() {
        let budget = budget_for(&w);
        for p in [Policy::S3Fifo, Policy::TinyLfu, Policy::Lru] {
            let r = simulate(p, budget, &w);
            let hot = if w.scan {
                format!("{} / {}", r.hot_before_scan, r.hot_after_scan)
            } else {
                format!("{}", r.hot_before_scan)
            };
            println!(
                "| {} | {} | {:.4} | {:.4} | {hot} |",
                w.name,
                p.as_str(),
                r.hit_ratio,
                r.byte_hit_ratio
            );
        }
    }
}
