//! The `pricewire` command: serve, watch, replay, import, capture, bench.

fn main() {
    // Before any thread: connection buffers in their own mappings, so a
    // herd's memory goes back to the kernel when it leaves.
    pricewire::runtime::sys::tune_allocator();
    // `serve --config FILE` also takes flags from the file's [serve] table;
    // the command line wins.
    let args = match pricewire::cli::config_flags::merge(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => std::process::exit(pricewire::cli::refuse(e)),
    };
    let cli = pricewire::cli::help::parse_from(args);
    std::process::exit(pricewire::cli::run(cli));
}
