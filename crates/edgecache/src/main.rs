fn main() { eprintln!("edgecache: not built yet"); std::process::exit(1) }
