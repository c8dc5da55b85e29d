//! The engine's settings, as the server's `[aio]` section gives them (docs/config.md):
//! `mode`, and `[aio.thread_pool]` `threads`, `max_queue`, `queue`. Parsing the TOML
//! is the server's job; this crate only defines the values.

pub use crate::queue::QueueKind;

/// Which backend a worker uses, chosen once at start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Blocking syscalls on the worker's loop (nginx without `aio`).
    Off,
    /// Every operation goes to the shared thread pool (nginx `aio threads`).
    Threads,
    /// One io_uring per worker; falls back to `Threads` where unavailable.
    IoUring,
    /// Inline when it cannot block (RWF_NOWAIT, RESOLVE_CACHED), else the pool.
    #[default]
    Auto,
}

impl Mode {
    /// The config spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Threads => "threads",
            Mode::IoUring => "io_uring",
            Mode::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "off" => Ok(Mode::Off),
            "threads" => Ok(Mode::Threads),
            "io_uring" | "iouring" | "uring" => Ok(Mode::IoUring),
            "auto" => Ok(Mode::Auto),
            _ => Err(format!(
                "unknown aio mode {s:?} (off | threads | io_uring | auto)"
            )),
        }
    }
}

/// Everything needed to build the engines (see [`crate::Engine::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    pub mode: Mode,
    /// Pool threads (process-wide, shared by all workers).
    pub threads: usize,
    /// Pool queue bound; a full queue runs the operation inline (an overflow).
    pub max_queue: usize,
    /// The pool's hand-off queue.
    pub queue: QueueKind,
    /// Submission queue size of each worker's ring (the completion queue is twice it,
    /// and caps the operations in flight per worker).
    pub ring_entries: u32,
    /// `auto`: buffered writes and cache commits may run on the loop
    /// ([`crate::write_gate`]).
    pub inline_writes: bool,
}

impl Default for EngineConfig {
    /// The `[aio]` defaults of docs/config.md: auto, 32 threads, 65536 queued jobs, mutex
    /// queue.
    fn default() -> Self {
        EngineConfig {
            mode: Mode::Auto,
            threads: 32,
            max_queue: 65536,
            queue: QueueKind::Mutex,
            ring_entries: 256,
            inline_writes: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [Mode::Off, Mode::Threads, Mode::IoUring, Mode::Auto] {
            assert_eq!(m.as_str().parse::<Mode>(), Ok(m));
        }
        assert!("aio".parse::<Mode>().is_err());
    }
}
