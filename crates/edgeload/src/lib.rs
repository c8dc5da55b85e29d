//! edgeload: a wrk-class HTTP/1.1 (and HTTPS) load generator for the edgecache benchmark kit.
//!
//! How it fits: `main.rs` calls [`main_with_args`]. The flags are parsed and validated
//! in [`cli`]; [`run`] starts one [`worker`] thread per `-t`, each driving its share of
//! the [`conn`]ections on a single-threaded tokio runtime; responses are framed by the
//! sans-I/O [`codec`] (bodies checked by [`verify`] with `--verify`); every thread keeps
//! its own [`stats`], merged at the end and printed by [`report`] (wrk's layout) and
//! [`json`]. URL mixes and the weighted picker live in [`mix`], request bytes and the
//! URL parser in [`target`], wrk's number formats in [`units`]. `https://` adds a TLS
//! handshake and a TLS transport ([`tls`], rustls) under the same connection loop.
//! `--h3` replaces that loop with [`h3`]'s: HTTP/3 over QUIC (quinn + h3), the same
//! requests, statistics and report.

pub mod cli;
pub mod codec;
pub mod conn;
pub mod h3;
pub mod h3req;
pub mod json;
pub mod mix;
pub mod report;
pub mod run;
pub mod shared;
pub mod source;
pub mod stats;
pub mod target;
pub mod tls;
pub(crate) mod transport;
pub mod units;
pub mod verify;
pub mod worker;

pub use run::main_with_args;
