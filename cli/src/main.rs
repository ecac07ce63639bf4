//! `graph-rt`: the command-line tool of graph-rt.

use std::process::ExitCode;

use std::path::PathBuf;

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
    /// The PTX pass: make kernel parameters read their value from an argument-table slot.
    #[command(subcommand)]
    Ptx(Ptx),
}

#[derive(Subcommand)]
enum Ptx {
    /// Rewrites chosen parameters of chosen kernels to take the address of a table slot and
    /// prints each kernel's new signature.
    Indirect {
        /// The PTX to rewrite.
        input: PathBuf,
        /// Where to write the rewritten PTX.
        #[arg(short, long)]
        output: PathBuf,
        /// Only these kernels (default: every kernel).
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
        /// Exactly these parameters (`name` or `kernel:index`; default: every pointer the pass
        /// can prove is one).
        #[arg(long, value_delimiter = ',')]
        params: Vec<String>,
        /// Scalar parameters to rewrite too (`name` or `kernel:index`).
        #[arg(long, value_delimiter = ',')]
        scalars: Vec<String>,
        /// Programmatic dependent launch: launch_dependents, the slot loads, wait, then the body
        /// (raises the target to sm_90 and the PTX ISA to 7.8 where lower).
        #[arg(long)]
        pdl: bool,
        /// Rewrite Triton's trailing scratch pointers too.
        #[arg(long)]
        keep_triton_scratch: bool,
    },
    /// Lists the kernels and their parameters, and what the pass would do with each.
    Inspect {
        /// The PTX to read.
        input: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info => info().map_err(|e| e.to_string()),
        Command::Ptx(cmd) => ptx(cmd),
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

fn ptx(cmd: Ptx) -> Result<(), String> {
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    match cmd {
        Ptx::Inspect { input } => {
            let info = graph_rt_ptx::inspect(&read(&input)?)
                .map_err(|e| format!("{}: {e}", input.display()))?;
            print!("{info}");
            Ok(())
        }
        Ptx::Indirect {
            input,
            output,
            kernels,
            params,
            scalars,
            pdl,
            keep_triton_scratch,
        } => {
            let refs = |v: Vec<String>| -> Result<Vec<graph_rt_ptx::ParamRef>, String> {
                v.iter()
                    .map(|s| s.parse().map_err(|e| format!("{e}")))
                    .collect()
            };
            let options = graph_rt_ptx::Options {
                kernels: (!kernels.is_empty()).then_some(kernels),
                params: refs(params)?,
                scalars: refs(scalars)?,
                pdl,
                exclude_triton_scratch: !keep_triton_scratch,
            };
            let out = graph_rt_ptx::indirect(&read(&input)?, &options)
                .map_err(|e| format!("{}: {e}", input.display()))?;
            std::fs::write(&output, &out.ptx).map_err(|e| format!("{}: {e}", output.display()))?;
            for note in &out.notes {
                eprintln!("note: {note}");
            }
            for k in &out.kernels {
                println!("{}", k.describe());
            }
            Ok(())
        }
    }
}
