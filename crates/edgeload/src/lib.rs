//! edgeload library (being built)
