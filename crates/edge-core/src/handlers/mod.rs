//! Location handlers: `proxy` (to an upstream, cached or not), `static` (files under a
//! root), `return` (a fixed status and body) and `empty_gif`.
pub mod cache;
pub mod proxy;
pub mod range;
pub mod simple;
pub mod static_files;
