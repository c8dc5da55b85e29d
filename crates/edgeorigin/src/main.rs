fn main() { eprintln!("edgeorigin: not built yet"); std::process::exit(1) }
