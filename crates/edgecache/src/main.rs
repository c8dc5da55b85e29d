//! `edgecache [-c FILE] [-t] [-V]`: parses the command line, loads the config (or the
//! embedded default) and runs the server. No logic lives here.
//!
//! Exit codes: 0 normal stop, 1 runtime failure, 2 bad usage or bad config.

use clap::Parser;
use edge_core::config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "edgecache",
    version,
    about = "An HTTP caching reverse proxy for CDN edge nodes"
)]
struct Cli {
    /// Config file (TOML). Without it, the embedded default config is used.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the config and exit: 0 if valid, 2 with file:line: key: message if not.
    #[arg(short = 't', long = "test")]
    test: bool,
    /// Print the effective embedded default config and exit.
    #[arg(long = "print-default-config")]
    print_default: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if cli.print_default {
        print!("{}", config::DEFAULT_CONFIG);
        return ExitCode::SUCCESS;
    }
    let loaded = match &cli.config {
        Some(path) => config::load(path).map(|(c, s)| (c, s.name)),
        None => Ok((
            config::embedded_default().0,
            config::DEFAULT_CONFIG_NAME.to_string(),
        )),
    };
    let cfg = match loaded {
        Ok((cfg, name)) => {
            if cli.test {
                eprintln!("edgecache: the configuration file {name} syntax is ok");
                eprintln!("edgecache: configuration file {name} test is successful");
                return ExitCode::SUCCESS;
            }
            cfg
        }
        Err(e) => {
            eprintln!("edgecache: {e}");
            return ExitCode::from(2);
        }
    };
    match edge_core::server::run(cfg, cli.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("edgecache: {e}");
            ExitCode::from(1)
        }
    }
}
