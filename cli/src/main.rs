//! `graph-rt`: the command-line tool of graph-rt.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use graph_rt::sys::format_version;
use graph_rt::{graph_features, Device};

#[derive(Parser)]
#[command(version, about = "graph-rt: CUDA graphs for Rust")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Driver version, devices and the graph features the driver supports.
    Info,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info => info(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graph-rt: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info() -> graph_rt::Result<()> {
    let driver = graph_rt::sys::driver()?;
    graph_rt::init()?;
    println!(
        "driver: CUDA {} (bindings: CUDA {}, minimum supported: CUDA {})",
        format_version(driver.version()),
        format_version(graph_rt::sys::HEADER_VERSION),
        format_version(graph_rt::sys::MIN_DRIVER_VERSION)
    );
    let count = Device::count()?;
    println!("devices: {count}");
    let mut first = None;
    for ordinal in 0..count {
        let d = Device::get(ordinal)?;
        let (major, minor) = d.compute_capability()?;
        println!(
            "  [{ordinal}] {}: compute capability {major}.{minor}, {:.1} GiB, {} multiprocessors",
            d.name()?,
            d.total_memory()? as f64 / (1u64 << 30) as f64,
            d.multiprocessor_count()?
        );
        first.get_or_insert(d);
    }
    println!(
        "graph features{}:",
        if first.is_some() { " (device 0)" } else { "" }
    );
    for f in graph_features(first.as_ref())? {
        let mark = if f.supported { "yes" } else { "no " };
        println!(
            "  {mark} {} (CUDA {}, {})",
            f.name,
            format_version(f.since),
            f.symbol
        );
    }
    Ok(())
}
