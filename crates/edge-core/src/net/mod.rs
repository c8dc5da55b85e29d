//! Listening sockets and accept strategies (levers 2 and 3 of background.md).
//!
//! How it fits: the server asks an [`AcceptStrategy`] (chosen once from `accept = ...`)
//! to bind every `[[listen]]` address for N workers *before* any worker starts, so a bind
//! error stops the process early with a clear message. Each worker then receives a
//! [`WorkerAcceptor`]: sockets to poll in its own reactor, or a channel fed by accept
//! threads. The worker's accept loop never knows which strategy made them.

pub mod accept;
pub mod inherit;
pub mod listener;
pub mod sys;

pub use accept::{strategy_for, AcceptPlan, AcceptStrategy, Accepted, WorkerAcceptor};
pub use listener::{bind_listener, Blocking, ListenSpec, PortSharing};
