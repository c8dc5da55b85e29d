//! edge-http (placeholder, being built)
