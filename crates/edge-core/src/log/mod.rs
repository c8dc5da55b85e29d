//! Logs: the access logs (formats compiled once, files shared by path, buffered per
//! worker) and the error log (tracing, to stderr or a file). SIGUSR1 reopens every
//! file, so logrotate can move them away first.
pub mod access;
pub mod error;
pub mod format;
pub mod time;
