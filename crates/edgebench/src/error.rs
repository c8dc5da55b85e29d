//! One error type for the runner, carrying the exit code it maps to.
//!
//! How it fits: every module returns [`Result`]; `main` turns the [`ErrorKind`] into the
//! process exit code from docs/contracts.md (2 bad usage or bad experiment file, 1 runtime
//! failure) plus 130 for an interrupted run, the shell's convention for Ctrl-C.

use std::fmt;

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad flags, an unknown experiment, an invalid experiment file or template.
    Usage,
    /// Something failed while running: a process did not start, a load run broke.
    Runtime,
    /// SIGINT/SIGTERM/SIGHUP arrived; everything started was stopped.
    Interrupted,
}

/// An error with a human message that names the file, process or key involved.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn usage(msg: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Usage,
            msg: msg.into(),
        }
    }
    pub fn runtime(msg: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Runtime,
            msg: msg.into(),
        }
    }
    pub fn interrupted() -> Error {
        Error {
            kind: ErrorKind::Interrupted,
            msg: "interrupted; every process started was stopped".into(),
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage => 2,
            ErrorKind::Runtime => 1,
            ErrorKind::Interrupted => 130,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// `.ctx("reading x")?` on io results: keeps the OS error text, adds what we were doing.
pub trait Context<T> {
    fn ctx(self, what: impl fmt::Display) -> Result<T>;
}

impl<T> Context<T> for std::io::Result<T> {
    fn ctx(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::runtime(format!("{what}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_contract() {
        assert_eq!(Error::usage("x").exit_code(), 2);
        assert_eq!(Error::runtime("x").exit_code(), 1);
        assert_eq!(Error::interrupted().exit_code(), 130);
    }

    #[test]
    fn context_keeps_the_os_message() {
        let r: std::io::Result<()> = Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        let e = r.ctx("opening /nope").unwrap_err();
        assert!(e.msg.starts_with("opening /nope: "), "{}", e.msg);
        assert_eq!(e.kind, ErrorKind::Runtime);
    }
}
