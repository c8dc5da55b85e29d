//! The report: `<out>/<experiment>.md` with the machine, the exact command, a table per
//! workload and the plots; `<experiment>-{rps,cpu,latency}.svg`; and `<experiment>.json`
//! with every raw cell.
//!
//! How it fits: [`write`] is the last step of a run and only reads [`Results`]. Every
//! figure is median (min–max) over the repetitions. The ratio columns compare each row
//! with the best *peer* of the same workload (highest req/s, lowest CPU per request),
//! so the edgecache row reads directly as "edgecache ÷ best peer".
//!
//! # Layout
//! - `rows.rs`: the figures ([`Row`]) and the targets ([`evaluate`]).
//! - `markdown.rs`: the Markdown text.
//! - `plots.rs`: the SVG plots.

mod markdown;
mod plots;
mod rows;

pub use markdown::markdown;
pub use plots::plots;
pub use rows::{evaluate, rows, Outcome, Row};

use std::path::{Path, PathBuf};

use crate::error::{Context, Result};
use crate::runner::Results;

/// Writes the report, plots and raw JSON into `out`; returns the Markdown path.
pub fn write(res: &Results, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).ctx(format!("creating {}", out.display()))?;
    let plots = plots(res);
    for (name, _, text) in &plots {
        let p = out.join(name);
        std::fs::write(&p, text).ctx(format!("writing {}", p.display()))?;
    }
    let names: Vec<(String, String)> = plots
        .iter()
        .map(|(n, a, _)| (n.clone(), a.clone()))
        .collect();
    let md = out.join(format!("{}.md", res.plan.name));
    std::fs::write(&md, markdown(res, &names)).ctx(format!("writing {}", md.display()))?;
    let json = out.join(format!("{}.json", res.plan.name));
    let text = serde_json::to_string_pretty(res)
        .map_err(|e| crate::error::Error::runtime(e.to_string()))?;
    std::fs::write(&json, text).ctx(format!("writing {}", json.display()))?;
    Ok(md)
}

#[cfg(test)]
mod tests;
