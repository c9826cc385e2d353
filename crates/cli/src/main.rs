//! The `codemode` binary: the command line of [`codemode::run_main`].

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(codemode::run_main(std::env::args_os()).0)
}
