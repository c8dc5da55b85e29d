//! edgebench: one command per experiment, edgecache side by side with nginx, Varnish and
//! Apache Traffic Server, written up as a Markdown report with SVG plots.
//!
//! How it fits: an experiment is a TOML file under `bench/experiments/`
//! ([`experiment`]); peer configs are templates under `bench/peers/` ([`servers`],
//! [`template`]). The [`runner`] starts `edgeorigin`, the servers and the load generator
//! ([`load`]) as pinned child processes ([`process`], [`cpus`]), measures each cell
//! (req/s, MB/s, latency, server CPU and RSS from [`procstat`], origin requests), and
//! [`report`] writes `<out>/<experiment>.md`, plots ([`svg`]) and raw JSON. Every started
//! process is stopped on exit, error, panic or Ctrl-C ([`interrupt`]).
//!
//! ```text
//! edgebench tier [--quick] [--duration 10s] [--out docs/results]   (bench/tier.py)
//! edgebench limits [--quick] [--duration 10s] [--reps 3] [--cpus 0:1]   (bench/limits.py)
//! edgebench hits [--quick] [--peers nginx,varnish,ats] [--out docs/results]
//!                [--duration 10s] [--repetitions 3] [--cpus 0:1] [--loadgen edgeload|wrk]
//! ```

pub mod bins;
pub mod cgroup;
pub mod cli;
pub mod cpus;
pub mod error;
pub mod experiment;
pub mod fio;
pub mod http;
pub mod interrupt;
pub mod kind;
pub mod load;
pub mod machine;
pub mod process;
pub mod procstat;
pub mod prom;
pub mod report;
pub mod runner;
pub mod scripted;
pub mod servers;
pub mod stats;
pub mod svg;
pub mod template;

/// Runs edgebench with `argv` (program name first); returns the exit code.
pub fn main_with(argv: Vec<String>) -> i32 {
    use clap::Parser;
    let cli = match cli::Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if let Some((script, quick)) = scripted::lookup(&cli.experiment) {
        return match cli::find_bench_dir(cli.bench_dir.as_deref()) {
            Ok(dir) => scripted::run(&cli, &dir, script, quick),
            Err(e) => {
                eprintln!("edgebench: {e}");
                e.exit_code()
            }
        };
    }
    if let Err(e) = interrupt::install() {
        eprintln!("edgebench: sigaction() failed: {e}");
        return 1;
    }
    let scripted: Vec<&str> = scripted::names().collect();
    let result = cli.options(&argv, &scripted).and_then(|(opts, out)| {
        let res = runner::run(&opts)?;
        let md = report::write(&res, &out)?;
        Ok((md, res.warnings.len()))
    });
    match result {
        Ok((md, warnings)) => {
            eprintln!(
                "edgebench: report written to {} ({warnings} warnings)",
                md.display()
            );
            0
        }
        Err(e) => {
            eprintln!("edgebench: {e}");
            e.exit_code()
        }
    }
}
