//! The thread pools' tables: `[aio]` (the file I/O backend and its `thread_pool`) and
//! `[compress_pool]`.

use super::SizeOrOff;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AioMode {
    Off,
    Threads,
    #[serde(rename = "io_uring")]
    IoUring,
    /// RWF_NOWAIT reads on the loop, the pool only when the data is not cached.
    #[default]
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    #[default]
    Mutex,
    Lockfree,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadPool {
    #[serde(default = "default_pool_threads")]
    pub threads: usize,
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    #[serde(default)]
    pub queue: QueueKind,
}
fn default_pool_threads() -> usize {
    32
}
fn default_max_queue() -> usize {
    65536
}
impl Default for ThreadPool {
    fn default() -> Self {
        ThreadPool {
            threads: default_pool_threads(),
            max_queue: default_max_queue(),
            queue: QueueKind::Mutex,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aio {
    #[serde(default)]
    pub mode: AioMode,
    #[serde(default = "default_directio")]
    pub directio: SizeOrOff,
    #[serde(default = "super::default_true")]
    pub sendfile: bool,
    /// The largest cache-hit body (or range) sent by sendfile; larger ones are written
    /// from a mapping of the file in one write (`http/mapped.rs`). `"off"`: always
    /// sendfile. `"auto"` (the default): 448 KiB, and over it each worker uses
    /// whichever of the two it measures cheaper (`http/large_send.rs`).
    #[serde(default)]
    pub sendfile_max: SendfileMax,
    /// `auto`: buffered writes (fill bodies, cache commits) run on the loop while the
    /// kernel is far from throttling writers and no such write has slept lately
    /// (`edge_aio::write_gate`); false: all of them on the pool.
    #[serde(default = "super::default_true")]
    pub inline_writes: bool,
    #[serde(default)]
    pub thread_pool: ThreadPool,
}
fn default_directio() -> SizeOrOff {
    SizeOrOff(Some(4 << 20))
}
/// `aio.sendfile_max`: the size over which a cache-hit body may leave from a mapping,
/// and whether each worker chooses between the two by measuring (`"auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendfileMax {
    /// None: always sendfile (`"off"`).
    pub size: Option<u64>,
    /// `"auto"`: over `size`, mapped or sendfile, whichever this worker measures cheaper.
    pub adaptive: bool,
}

/// The size `"auto"` chooses over: below about 448 KiB there is little pacing to
/// avoid and sendfile's zero copy wins on every host measured (`http/mapped.rs`).
const SENDFILE_MAX_AUTO: u64 = 448 << 10;

impl Default for SendfileMax {
    fn default() -> Self {
        SendfileMax {
            size: Some(SENDFILE_MAX_AUTO),
            adaptive: true,
        }
    }
}

impl<'de> Deserialize<'de> for SendfileMax {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(i64),
        }
        let fixed = |size: SizeOrOff| SendfileMax {
            size: size.0,
            adaptive: false,
        };
        match Raw::deserialize(d)? {
            Raw::Text(t) if t == "auto" => Ok(SendfileMax::default()),
            Raw::Text(t) => {
                SizeOrOff::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&t))
                    .map(fixed)
                    .map_err(|e: D::Error| {
                        // The inner error's text may end in a line break.
                        let e = e.to_string();
                        serde::de::Error::custom(format!("{} (or \"auto\")", e.trim_end()))
                    })
            }
            Raw::Number(n) => {
                SizeOrOff::deserialize(serde::de::value::I64Deserializer::<D::Error>::new(n))
                    .map(fixed)
            }
        }
    }
}
impl Default for Aio {
    fn default() -> Self {
        Aio {
            mode: AioMode::Auto,
            directio: default_directio(),
            sendfile: true,
            sendfile_max: SendfileMax::default(),
            inline_writes: true,
            thread_pool: ThreadPool::default(),
        }
    }
}

/// `[compress_pool]`: the threads that compress for every worker when a location has
/// `compress_offload` (the default), and the bound on waiting work.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressPool {
    /// None: one per CPU.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Jobs waiting for a thread, over all workers; past it a response that has not
    /// started compressing goes out uncompressed (and a started one compresses its next
    /// chunk inline): work never queues without bound.
    #[serde(default = "default_compress_queue")]
    pub max_queue: usize,
    /// CPUs the threads are pinned to, round robin (None: not pinned): cores kept for
    /// compression, away from the workers' event loops (the accelerator model).
    #[serde(default)]
    pub cpus: Option<Vec<usize>>,
    /// `"idle"` (default): the threads run in the `SCHED_IDLE` class, so a worker that
    /// wakes on a CPU where one compresses takes the CPU at once; `"normal"`: they
    /// compete with the workers as equals.
    #[serde(default)]
    pub priority: PoolPriority,
}

/// `[compress_pool] priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolPriority {
    #[default]
    Idle,
    Normal,
}
fn default_compress_queue() -> usize {
    1024
}

impl Default for CompressPool {
    fn default() -> Self {
        CompressPool {
            threads: None,
            max_queue: default_compress_queue(),
            cpus: None,
            priority: PoolPriority::Idle,
        }
    }
}
