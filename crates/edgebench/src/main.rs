//! `edgebench`: see the library docs and `docs/edgebench.md`.

fn main() {
    std::process::exit(edgebench::main_with(std::env::args().collect()));
}
