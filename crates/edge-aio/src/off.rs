//! The `off` backend: every syscall inline on the worker's thread, as nginx without
//! `aio`. The baseline the others are measured against; also what the others fall back
//! to for a single operation when their queue is full.

use crate::inflight::Keep;
use crate::sys::SysOp;

/// Runs operations inline.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OffEngine;

impl OffEngine {
    pub(crate) fn run(&self, op: SysOp, keep: Keep) -> (i64, Keep) {
        // SAFETY: the pointers in `op` point into `keep`, which this frame owns for the
        // whole call.
        (unsafe { op.run() }, keep)
    }
}
