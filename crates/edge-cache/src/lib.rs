//! edge-cache (placeholder, being built)
