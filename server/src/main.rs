fn main() {
    eprintln!("evi-server: not implemented yet");
    std::process::exit(1);
}
