//! The `kiln` command line: `kiln inspect MODEL` prints a model's graph IR (with
//! `--emit opt`, the optimized graph IR and the report of every pass; with `--emit loop
//! [--target T]`, the loop IR of its kernels under T's default schedules); `kiln compile` builds a
//! model for a target and exports it to one file; `kiln run` runs a model or an exported
//! file; `kiln bench` times it with the graph executor's benchmark; `kiln profile` prints
//! the debug executor's per-node table. MODEL may be an ONNX file everywhere, with
//! `--shape NAME=DIMS` fixing its input shapes. Errors print as one line (`error: ...`) with a
//! non-zero exit code, never as a panic; usage errors too. Every `--target` is looked up
//! in the `kiln` crate's backend registry, and the help texts list its targets (the word
//! `TARGETS` in a help text below is replaced by that list when the command is built, and
//! `LISTINGS` by the backends' code listings for `inspect --emit`).

/// `print!` for the whole crate (defined before the modules, so it shadows std's in
/// them): a closed stdout (`kiln run ... | head -1`) ends the process quietly with
/// status 0 instead of panicking as std's macro does; another write error is one
/// `error:` line.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` through the crate's [`print!`].
macro_rules! println {
    () => {
        print!("\n")
    };
    ($($arg:tt)*) => {
        print!("{}\n", format_args!($($arg)*))
    };
}

mod bench;
mod compile;
mod graph;
mod model;
mod progress;
mod run;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Kiln, a deep-learning compiler: optimize a model's graph, generate kernels for a
/// target, run them.
///
/// MODEL is a zoo model (ZOO), a text IR file or an ONNX file (`--shape NAME=DIMS` fixes
/// its input shapes); FILE is a module exported by `kiln compile`, which runs on the
/// target recorded in it.
///
/// Targets: TARGETS. `ref` is the graph-IR reference interpreter (the oracle), `interp`
/// the loop-IR interpreter behind the graph executor, the others compile kernels (`cpu`:
/// native code through Cranelift). Options follow the kind: `cpu -threads=4`.
///
/// `kiln COMMAND --help` says more about each command.
#[derive(Parser, Debug)]
#[command(name = "kiln", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Draw no progress on stderr (it is drawn only when stderr is a terminal anyway).
    #[arg(short, long, global = true)]
    quiet: bool,
}

/// Inputs of a model run: from `.npy` files, the rest random.
#[derive(Args, Debug)]
struct InputArgs {
    /// An input tensor: `NAME=FILE.npy`. Inputs not given are random from --seed.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Seed for random inputs (input i uses seed + i).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// How a model is loaded: input shapes of an ONNX model, a params file.
#[derive(Args, Debug)]
struct ShapeArgs {
    /// Fix the shape of an ONNX model's input: `NAME=1,3,224,224` (repeatable; needed
    /// for every input with a dynamic dimension).
    #[arg(long = "shape", value_name = "NAME=DIMS")]
    shapes: Vec<String>,
    /// Bind weights from a params file (TVM's format, as `relay.save_param_dict` writes
    /// it) to @main's parameters by name. A parameter left unbound is a graph input.
    #[arg(long, value_name = "FILE.params")]
    params: Option<std::path::PathBuf>,
}

/// The graph-level optimization level (0..=3, Relay's levels); for models only, not
/// exported files.
fn opt_level_arg() -> clap::builder::RangedI64ValueParser<u8> {
    clap::value_parser!(u8).range(0..=i64::from(kiln::layers::rewrite::pass::MAX_OPT_LEVEL))
}

/// The largest `--repeat` or `--number` accepted.
const MAX_COUNT: usize = 1_000_000;

/// A count from 1 to [`MAX_COUNT`].
fn count_arg(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {MAX_COUNT}")),
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a model's graph IR, optimized graph IR, loop IR or generated code, as text.
    Inspect {
        /// `zoo:NAME`, a text IR file or an ONNX file.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Annotate every binding with its type (`/* ty=... */`).
        #[arg(long)]
        types: bool,
        /// What to print: `graph` (the graph IR as loaded), `opt` (the graph IR after the
        /// optimizer, then a report of every pass as comments), `loop` (the loop IR of
        /// every kernel of the optimized graph, one per fused group), or a backend's
        /// listing of the code it generates for those kernels: LISTINGS.
        #[arg(long, default_value = "graph")]
        emit: String,
        /// The target whose default schedules `--emit loop` lowers with: TARGETS (or a
        /// kind whose backend cannot run here, such as `cuda` without a CUDA runtime).
        #[arg(long, default_value = "cpu")]
        target: String,
        /// Graph-level optimization level for `--emit opt` and `--emit loop`, 0..=3
        /// (default 3).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
    },
    /// Build a model for a target and export it to one file.
    ///
    /// The file holds the graph JSON, the params, the target and the kernels; the command
    /// prints the kernel count, the build time and its steps, and the memory plan.
    Compile {
        /// `zoo:NAME`, a text IR file or an ONNX file.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// What to compile for: one of TARGETS, with options (`cpu -threads=4`); `ref`
        /// compiles nothing.
        #[arg(long)]
        target: String,
        /// The file to write.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Graph-level optimization level, 0..=3 (default 3).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
    },
    /// Run a model (or an exported module) once and print its outputs.
    Run {
        /// `zoo:NAME`, a text IR file, an ONNX file, or a module exported by
        /// `kiln compile`.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Where to run: one of TARGETS. A model runs on `ref` (the reference
        /// interpreter) when not given; an exported module on the target recorded in it.
        #[arg(long)]
        target: Option<String>,
        #[command(flatten)]
        inputs: InputArgs,
        /// Write output 0 to this `.npy` file.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Also run the model on `ref` with the same inputs and print the largest
        /// absolute difference of the outputs (an error above 1e-4).
        #[arg(long)]
        check: bool,
        /// Graph-level optimization level, 0..=3 (default 3; models only).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
    },
    /// Time a model (or an exported module) with the graph executor's benchmark.
    Bench {
        /// `zoo:NAME`, a text IR file, an ONNX file, or a module exported by
        /// `kiln compile`.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Where to run: one of TARGETS (needed for a model; an exported module runs on
        /// the target recorded in it).
        #[arg(long)]
        target: Option<String>,
        #[command(flatten)]
        inputs: InputArgs,
        /// Graph-level optimization level, 0..=3 (default 3; models only).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
        /// Measurements to take.
        #[arg(long, default_value_t = 5, value_parser = count_arg)]
        repeat: usize,
        /// Runs per measurement (each result is their mean).
        #[arg(long, default_value_t = 5, value_parser = count_arg)]
        number: usize,
        /// Grow --number until one measurement takes at least this many ms (0: off).
        #[arg(
            long,
            default_value_t = 0.0,
            value_name = "MS",
            allow_negative_numbers = true
        )]
        min_repeat_ms: f64,
        /// Time the input copies to the device and the output copies back too.
        #[arg(long)]
        end_to_end: bool,
        /// Print one JSON object: compile_ms, mean_ms, median_ms, std_ms, min_ms, max_ms,
        /// results_ms, clock.
        #[arg(long)]
        json: bool,
    },
    /// Draw a model's graph to an SVG, HTML or DOT file.
    ///
    /// One cluster per kernel (fused group), shapes on the edges; with --profile, kernels
    /// coloured by their share of the run time.
    Graph {
        /// `zoo:NAME`, a text IR file or an ONNX file.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// The file to write: `.svg`, `.html` (pan/zoom, click for attributes and loop
        /// IR) or `.dot` (Graphviz).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Graph-level optimization level, 0..=3 (default 3; 0 shows one kernel per op).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
        /// The target whose schedules the HTML page shows and where --profile runs.
        #[arg(long, default_value = "cpu")]
        target: String,
        /// Build for --target, time every kernel and colour it by its share of the run.
        #[arg(long)]
        profile: bool,
        /// Calls of each kernel to average over with --profile.
        #[arg(long, default_value_t = 10, value_parser = count_arg)]
        number: usize,
    },
    /// Time every kernel call with the debug executor and print the per-call table.
    Profile {
        /// `zoo:NAME`, a text IR file, an ONNX file, or a module exported by
        /// `kiln compile`.
        model: String,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Where to run: a compiling target, one of TARGETS but `ref` (needed for a
        /// model; an exported module runs on the target recorded in it).
        #[arg(long)]
        target: Option<String>,
        #[command(flatten)]
        inputs: InputArgs,
        /// Graph-level optimization level, 0..=3 (default 3; models only).
        #[arg(long, value_name = "N", value_parser = opt_level_arg())]
        opt_level: Option<u8>,
        /// Calls of each kernel to average over.
        #[arg(long, default_value_t = 10, value_parser = count_arg)]
        number: usize,
        /// Also write every node's output to this folder as `.npy` files.
        #[arg(long, value_name = "DIR")]
        dump_dir: Option<PathBuf>,
    },
}

/// The command with the registry's target list in every help text that names TARGETS,
/// its backends' code listings where it names LISTINGS, and the zoo's models where it
/// names ZOO.
fn command() -> clap::Command {
    let registry = compile::registry();
    let targets = registry.targets_text();
    let zoo = kiln::layers::ir::zoo::NAMES
        .iter()
        .map(|n| format!("`zoo:{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let listings = registry
        .listing_names()
        .iter()
        .map(|n| {
            let kind = registry.listing(n).map(|b| b.target_kind().to_string());
            format!("`{n}` (the `{}` backend's)", kind.unwrap_or_default())
        })
        .collect::<Vec<_>>()
        .join(", ");
    let fill = |text: String| {
        text.replace("TARGETS", &targets)
            .replace("ZOO", &zoo)
            .replace("LISTINGS", &listings)
    };
    let mut cmd = Cli::command();
    if let Some(about) = cmd.get_about().map(|a| fill(a.to_string())) {
        cmd = cmd.about(about);
    }
    if let Some(about) = cmd.get_long_about().map(|a| fill(a.to_string())) {
        cmd = cmd.long_about(about);
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for sub in subs {
        cmd = cmd.mut_subcommand(sub, |c| {
            let args: Vec<String> = c.get_arguments().map(|a| a.get_id().to_string()).collect();
            args.into_iter().fold(c, |c, arg| {
                c.mut_arg(arg, |a| {
                    let help = a.get_help().map(|h| fill(h.to_string()));
                    match help {
                        Some(h) => a.help(h),
                        None => a,
                    }
                })
            })
        });
    }
    cmd
}

/// Writes to stdout; see [`print!`].
fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

fn main() -> ExitCode {
    let cli = match command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                eprintln!("error: {}", usage_error_line(&e));
                return ExitCode::from(2);
            }
        },
    };
    if let Err(e) = kiln::layers::ir::tensor::budget::check_memory_limit_env() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    progress::init(cli.quiet);
    let result = dispatch(cli.command);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs one command.
fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Inspect {
            model,
            shape,
            types,
            emit,
            target,
            opt_level,
        } => model::inspect(
            &model,
            &model::Loading::parse(&shape.shapes, shape.params)?,
            &model::InspectArgs {
                types,
                emit,
                target,
                opt_level,
            },
        ),
        Command::Compile {
            model,
            shape,
            target,
            output,
            opt_level,
        } => compile::compile(&compile::CompileArgs {
            model,
            loading: model::Loading::parse(&shape.shapes, shape.params)?,
            target,
            output,
            opt_level,
        }),
        Command::Run {
            model,
            shape,
            target,
            inputs,
            output,
            opt_level,
            check,
        } => run::run(&run::RunArgs {
            model,
            loading: model::Loading::parse(&shape.shapes, shape.params)?,
            target,
            inputs: inputs.inputs,
            output,
            seed: inputs.seed,
            opt_level,
            check,
        }),
        Command::Bench {
            model,
            shape,
            target,
            inputs,
            opt_level,
            repeat,
            number,
            min_repeat_ms,
            end_to_end,
            json,
        } => bench::bench(&bench::BenchArgs {
            model,
            loading: model::Loading::parse(&shape.shapes, shape.params)?,
            target,
            inputs: inputs.inputs,
            seed: inputs.seed,
            opt_level,
            repeat,
            number,
            min_repeat_ms,
            end_to_end,
            json,
        }),
        Command::Graph {
            model,
            shape,
            output,
            opt_level,
            target,
            profile,
            number,
        } => graph::graph(&graph::GraphArgs {
            model,
            loading: model::Loading::parse(&shape.shapes, shape.params)?,
            opt_level,
            target,
            profile,
            number,
            output,
        }),
        Command::Profile {
            model,
            shape,
            target,
            inputs,
            opt_level,
            number,
            dump_dir,
        } => bench::profile(&bench::ProfileArgs {
            model,
            loading: model::Loading::parse(&shape.shapes, shape.params)?,
            target,
            inputs: inputs.inputs,
            seed: inputs.seed,
            opt_level,
            number,
            dump_dir,
        }),
    }
}

/// `outer: inner: innermost`, on one line, each cause once: a cause that its outer
/// error's message already ends with (`{path}: {source}`) is not repeated.
fn format_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.ends_with(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A usage error from clap on one line: its first paragraph (what is wrong, without the
/// usage block and the `--help` hint), `error: ` prefix removed, then clap's suggestion
/// if it has one (`tip: a similar subcommand exists: 'run'`) as `did you mean ...?`.
fn usage_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut paragraphs = text.split("\n\n");
    let first = paragraphs.next().unwrap_or(&text);
    let first = first.trim().strip_prefix("error:").unwrap_or(first);
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    let suggestion = paragraphs
        .flat_map(str::lines)
        .filter_map(|l| l.trim().strip_prefix("tip:"))
        .find_map(|tip| {
            tip.rsplit_once(": ")
                .map(|(_, what)| what.trim().to_string())
        });
    match suggestion {
        Some(what) => format!("{line}; did you mean {what}? (see --help)"),
        None => format!("{line} (see --help)"),
    }
}
