//! `edgeorigin`: the origin object generator as a command.
//!
//! How it fits: flags become [`edgeorigin::Options`], [`edgeorigin::start`] binds and
//! serves on background threads, and the main thread waits for SIGTERM or SIGINT, then
//! stops the origin and exits 0. Bad flags exit 2 (clap's usage errors), a failed bind
//! or any other runtime failure exits 1.

use clap::Parser;
use edgeorigin::{ObjDist, Options};
use std::net::SocketAddr;
use std::process::ExitCode;

/// Serves deterministic, verifiable objects with cache headers and fault injection.
#[derive(Parser, Debug)]
#[command(name = "edgeorigin", version, about)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:8081.
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Object sizes /obj/rand picks from (comma-separated: 1k,10k,100k,1m or bytes).
    #[arg(long, default_value = "1k,10k,100k,1m", value_parser = parse_sizes)]
    sizes: Sizes,
    /// Ids per size for /obj/rand (ids 0..N).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// How /obj/rand picks: fixed (first size), uniform, zipf.
    #[arg(long = "obj-dist", default_value = "fixed", value_parser = clap::builder::PossibleValuesParser::new(["fixed", "uniform", "zipf"]))]
    obj_dist: String,
    /// Cache-Control max-age in seconds (a request's ?max_age= overrides it).
    #[arg(long = "max-age", default_value_t = 3600)]
    max_age: u64,
    /// Serving threads (each its own runtime and SO_REUSEPORT listener).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
}

/// A parsed `--sizes` list (a newtype so clap treats it as one value).
#[derive(Debug, Clone)]
struct Sizes(Vec<u64>);

fn parse_sizes(s: &str) -> Result<Sizes, String> {
    let sizes: Result<Vec<u64>, String> = s
        .split(',')
        .map(str::trim)
        .map(|p| {
            edgeorigin::parse_size(p)
                .ok_or_else(|| format!("bad size {p:?} (examples: 4k, 1m, 1000)"))
        })
        .collect();
    let sizes = sizes?;
    if sizes.is_empty() {
        return Err("at least one size".into());
    }
    Ok(Sizes(sizes))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = Options {
        listen: args.listen,
        sizes: args.sizes.0,
        count: args.count,
        obj_dist: args.obj_dist.parse::<ObjDist>().unwrap_or_default(),
        max_age: args.max_age,
        threads: args.threads as usize,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("edgeorigin: creating the signal runtime failed: {e}");
            return ExitCode::from(1);
        }
    };
    // Signal handlers go in before the listener opens: a supervisor (or a test) may
    // send SIGTERM as soon as the port answers, and that must be a clean exit 0.
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        let _rt = rt.enter();
        signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)))
    };
    let (mut term, mut int) = match signals {
        Ok(s) => s,
        Err(e) => {
            eprintln!("edgeorigin: installing signal handlers failed: {e}");
            return ExitCode::from(1);
        }
    };
    let sizes: Vec<String> = opts
        .sizes
        .iter()
        .map(|&s| edgeorigin::format_size(s))
        .collect();
    let (dist, count, threads) = (opts.obj_dist, opts.count, opts.threads);
    let handle = match edgeorigin::start(opts) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("edgeorigin: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "edgeorigin: listening on {} (threads {threads}, sizes {}, count {count}, obj-dist {dist})",
        handle.local_addr(),
        sizes.join(",")
    );
    rt.block_on(async {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    });
    handle.shutdown();
    ExitCode::SUCCESS
}
