//! `edgecache [-c FILE] [-t] [-s SIGNAL] [-V]`: parses the command line, loads the config
//! (or the embedded default) and runs the server, or signals the running one.
//! `edgecache sign --secret-file F [--expires 1h] URL` prints a signed URL
//! (`secure_link`). No logic lives here.
//!
//! Exit codes: 0 normal stop, 1 runtime failure, 2 bad usage or bad config.

use clap::{Args, Parser, Subcommand};
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
    /// Signal the running instance through its pid file (`pid` in the config):
    /// reload (SIGHUP), stop (SIGTERM: fast, in-flight requests get a second),
    /// quit (SIGQUIT: graceful, in-flight requests finish), reopen (SIGUSR1: the logs),
    /// upgrade (SIGUSR2: start the binary again on the same sockets).
    #[arg(short = 's', long = "signal", value_name = "SIGNAL",
          value_parser = ["reload", "stop", "quit", "reopen", "upgrade"])]
    signal: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print URL signed for a `secure_link` location (docs/limits.md).
    Sign(SignArgs),
}

#[derive(Args)]
struct SignArgs {
    /// The secret file (its bytes, a trailing newline stripped, are the HMAC key): the
    /// first `secret_file` of the location.
    #[arg(long = "secret-file", value_name = "FILE")]
    secret_file: PathBuf,
    /// When the link expires: a duration from now (1h, 30m, 3600, 1d12h), or
    /// @UNIX_SECONDS (a past time makes an expired link).
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "1h",
        allow_hyphen_values = true
    )]
    expires: String,
    /// The location's `expires_arg`.
    #[arg(long = "expires-arg", value_name = "NAME", default_value = "expires")]
    expires_arg: String,
    /// The location's `signature_arg`.
    #[arg(long = "signature-arg", value_name = "NAME", default_value = "sig")]
    signature_arg: String,
    /// One `include` template of the location, in order (repeat the flag; default
    /// "$uri"). Built-in variables only: pass a map or geo value as a literal.
    #[arg(long = "include", value_name = "TEMPLATE")]
    include: Vec<String>,
    /// The client address, when `include` has $remote_addr or $binary_remote_addr.
    #[arg(long = "remote-addr", value_name = "IP")]
    remote_addr: Option<std::net::IpAddr>,
    /// A request field ("Name: value"), when `include` has $http_NAME or $cookie_NAME.
    #[arg(short = 'H', long = "header", value_name = "FIELD")]
    header: Vec<String>,
    /// A path with its query (/video/1.mp4?q=hd) or an absolute http(s) URL.
    url: String,
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
    if let Some(Command::Sign(args)) = &cli.command {
        return sign(args);
    }
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
            if let Some(sig) = &cli.signal {
                return send_signal(&cfg, &name, sig);
            }
            if cli.test {
                eprintln!("edgecache: the configuration file {name} syntax is ok");
                eprintln!("edgecache: configuration file {name} test is successful");
                return ExitCode::SUCCESS;
            }
            cfg
        }
        Err(e) => {
            // Exactly `file:line: key: message` (the contract `-t` users parse).
            eprintln!("{e}");
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

/// `-s`: signals the instance named by the config's pid file. 0 when sent, 1 when it
/// could not be (no pid file, no such process), 2 when the config has no `pid`.
fn send_signal(cfg: &config::Config, name: &str, sig: &str) -> ExitCode {
    let Some(pid_file) = &cfg.pid else {
        eprintln!(
            "edgecache: {name} sets no pid file (pid = \"...\"): cannot find the running instance"
        );
        return ExitCode::from(2);
    };
    let Some(signo) = edge_core::server::upgrade::signal_named(sig) else {
        eprintln!("edgecache: unknown signal {sig:?}");
        return ExitCode::from(2);
    };
    match edge_core::server::upgrade::signal_running(pid_file, signo) {
        Ok(pid) => {
            eprintln!("edgecache: sent {sig} to {pid}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("edgecache: {e}");
            ExitCode::from(1)
        }
    }
}

/// `edgecache sign`: prints the signed URL; 2 with a message when it cannot make one.
fn sign(a: &SignArgs) -> ExitCode {
    use edge_core::secure_link::{sign, unix_now};
    let made = (|| {
        let secret = config::secure_link::read_secret(&a.secret_file)?;
        let include = if a.include.is_empty() {
            vec!["$uri".to_string()]
        } else {
            a.include.clone()
        };
        sign::sign_url(&sign::SignRequest {
            url: &a.url,
            secret: &secret,
            expires: sign::expires_at(&a.expires, unix_now())?,
            expires_arg: &a.expires_arg,
            signature_arg: &a.signature_arg,
            include: &include,
            remote_addr: a.remote_addr,
            headers: &a.header,
        })
    })();
    match made {
        Ok(url) => {
            println!("{url}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("edgecache: sign: {e}");
            ExitCode::from(2)
        }
    }
}
