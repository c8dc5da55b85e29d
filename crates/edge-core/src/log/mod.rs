//! Logs: the access log (nginx `combined` plus request time and cache status, buffered
//! per worker) and the error log (tracing, to stderr or a file). SIGUSR1 reopens both
//! files, so logrotate can move them away first.
pub mod access;
pub mod error;
pub mod time;
