//! edgeorigin library (being built)
