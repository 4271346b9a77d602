//! The `harness` binary: everything is in the library; `cli::main` parses, dispatches and returns
//! the exit code.

fn main() {
    std::process::exit(harness::cli::main());
}
