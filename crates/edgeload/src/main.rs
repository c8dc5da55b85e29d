//! The `edgeload` command. All logic lives in the library (`edgeload::run`).

fn main() {
    std::process::exit(edgeload::main_with_args(std::env::args_os()));
}
