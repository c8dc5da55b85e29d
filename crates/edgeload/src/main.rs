fn main() { eprintln!("edgeload: not built yet"); std::process::exit(1) }
