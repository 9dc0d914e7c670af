fn main() -> std::process::ExitCode {
    evi::cli::main()
}
