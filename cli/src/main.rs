//! The `kiln` command line: `kiln inspect MODEL` prints a model's graph IR (or, with
//! `--emit loop [--target cpu|gpu]`, the loop IR of its kernels), `kiln run
//! MODEL --target ref` runs it in the reference interpreter. Errors print as one line
//! (`error: ...`) with a non-zero exit code, never as a panic.

mod model;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kiln: a deep-learning compiler. MODEL is a zoo name (`zoo:resnet18`, `zoo:resnet34`,
/// `zoo:resnet50`, `zoo:mlp`) or a text IR file.
#[derive(Parser, Debug)]
#[command(name = "kiln", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a model's graph IR in the text form.
    Inspect {
        /// `zoo:NAME` or a path to a text IR file.
        model: String,
        /// Annotate every binding with its type (`/* ty=... */`).
        #[arg(long)]
        types: bool,
        /// What to print: `graph` (the graph IR) or `loop` (the loop IR of every kernel,
        /// one per op call).
        #[arg(long, default_value = "graph")]
        emit: String,
        /// The target kind the kernels are scheduled for with `--emit loop`: `cpu` or
        /// `gpu`.
        #[arg(long, default_value = "cpu")]
        target: String,
    },
    /// Run a model and print its outputs.
    Run {
        /// `zoo:NAME` or a path to a text IR file.
        model: String,
        /// Where to run: `ref` (the reference interpreter).
        #[arg(long, default_value = "ref")]
        target: String,
        /// An input tensor: `NAME=FILE.npy`. Inputs not given are random from --seed.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Write output 0 to this `.npy` file.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect {
            model,
            types,
            emit,
            target,
        } => model::inspect(&model, types, &emit, &target),
        Command::Run {
            model,
            target,
            inputs,
            output,
            seed,
        } => run::run(&run::RunArgs {
            model,
            target,
            inputs,
            output,
            seed,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `outer: inner: innermost`, on one line.
fn format_chain(e: &anyhow::Error) -> String {
    let text = e
        .chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
