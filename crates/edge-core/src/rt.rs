//! The tokio runtime each of the server's own threads runs on.

/// A current-thread runtime for one of the server's own threads (a worker, the admin
/// listener, the health checks); None, logged, when it cannot be built.
pub fn thread_runtime(what: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!("{what}: cannot build a runtime: {e}");
            None
        }
    }
}
