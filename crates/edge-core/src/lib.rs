//! edge-core (being built)
