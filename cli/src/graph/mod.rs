//! `kiln graph MODEL [--opt-level N] [--target T] [--profile] -o FILE.svg|.html|.dot`:
//! a picture of the model's graph before (`--opt-level 0`) or after optimization, one
//! cluster per kernel (fused group) with its ops inside, shapes and dtypes on the edges,
//! weights and constants folded into the op that reads them, and with `--profile` each
//! kernel coloured by its share of the run time on the target. The format follows the
//! output file's extension; SVG and HTML are drawn by kiln itself (no Graphviz).
//!
//! `scene` says what is drawn, `layout` where, `svg`, `html` and `dot` how.

mod dot;
mod html;
mod layout;
mod scene;
mod svg;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kiln::DebugExecutor;
use kiln::layers::te::topi::kernels_of;

use crate::compile::{self, DEFAULT_OPT_LEVEL, bind_inputs, parse_target};
use crate::model::{self, Loading};
use crate::progress;

use scene::{Scene, UnitKind, scene_of};

/// Arguments of `kiln graph`.
pub struct GraphArgs {
    /// `zoo:NAME`, a text IR file or an ONNX file.
    pub model: String,
    /// `--shape` overrides of ONNX input shapes and the `--params` file.
    pub loading: Loading,
    /// `--opt-level`, if given.
    pub opt_level: Option<u8>,
    /// The `--target` text: the kernels' schedules (loop IR in the HTML page) and where
    /// `--profile` runs.
    pub target: String,
    /// Time every kernel and colour it by its share.
    pub profile: bool,
    /// Calls of each kernel to average over with `--profile`.
    pub number: usize,
    /// The file to write; its extension picks the format.
    pub output: PathBuf,
}

/// The picture formats, by file extension.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    Svg,
    Html,
    Dot,
}

fn format_of(path: &std::path::Path) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("html" | "htm") => Ok(Format::Html),
        Some("dot" | "gv") => Ok(Format::Dot),
        _ => bail!(
            "cannot tell the picture format of `{}`: name the file .svg, .html or .dot",
            path.display()
        ),
    }
}

/// `kiln graph`.
pub fn graph(args: &GraphArgs) -> Result<()> {
    let format = format_of(&args.output)?;
    let resolved = parse_target(&args.target)?;
    let opt_level = args.opt_level.unwrap_or(DEFAULT_OPT_LEVEL);
    let model = model::load(&args.model, &args.loading)?;
    let opt = model::optimize(&args.model, &model, opt_level)?;
    let scene = scene_of(&opt.module, &|name| opt.params.contains_key(name))?;
    let mut scene = scene;
    let times = if args.profile {
        let times = profile(args, &resolved, &scene)?;
        let shares = times.shares();
        for unit in &mut scene.units {
            if let UnitKind::Kernel { index, .. } = unit.kind {
                unit.note = Some(format!(
                    "{:.1}%, {}",
                    shares[index] * 100.0,
                    crate::units::human_us(times.time_us[index])
                ));
            }
        }
        Some(times)
    } else {
        None
    };
    let layout = layout::layout(&scene);
    let text = match format {
        Format::Dot => dot::render(&scene),
        Format::Svg => svg::render(&scene, &layout, times.as_ref()),
        Format::Html => {
            // The loop IR on the target's schedules (CPU schedules for `ref`).
            let schedule = match &resolved.backend {
                Some(b) => b.schedule_kind(&resolved.target),
                None => kiln::layers::te::topi::ScheduleKind::Cpu,
            };
            let loops: Vec<String> = progress::step(format!("lowering {}", args.model), || {
                kernels_of(&opt.module, schedule)
            })
            .with_context(|| format!("cannot lower {}", args.model))?
            .iter()
            .map(|k| k.to_string())
            .collect();
            let picture = svg::render(&scene, &layout, times.as_ref());
            let title = format!("{} at opt level {opt_level}", args.model);
            html::render(&title, &scene, &picture, &loops, times.as_ref())
        }
    };
    std::fs::write(&args.output, text)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    let kernels = scene.kernels().count();
    println!(
        "{}: {} kernel{}, {} op{} drawn to {}",
        args.model,
        kernels,
        if kernels == 1 { "" } else { "s" },
        scene.op_count(),
        if scene.op_count() == 1 { "" } else { "s" },
        args.output.display()
    );
    Ok(())
}

/// Builds the model for `target` and times each kernel with the debug executor.
fn profile(args: &GraphArgs, resolved: &kiln::Resolved, scene: &Scene) -> Result<svg::KernelTimes> {
    let target = &resolved.target;
    if resolved.backend.is_none() {
        bail!(
            "--profile times kernels, and target `ref` (the reference interpreter) has none; \
             profile on a compiling target"
        );
    }
    let prepared = compile::prepare(
        &args.model,
        &args.loading,
        Some(&args.target),
        None,
        args.opt_level,
    )?;
    let mut exec = DebugExecutor::new(&prepared.module)?;
    bind_inputs(&mut exec, &prepared.module, &[], 0)?;
    let profile = progress::step(
        format!(
            "timing every kernel on {target}, {} calls each",
            args.number
        ),
        || exec.profile(args.number),
    )?;
    let mut time_us = vec![0.0; scene.kernels().count()];
    for (index, unit) in scene.kernels() {
        let rows: Vec<_> = profile
            .rows
            .iter()
            .filter(|r| r.kernel == unit.title)
            .collect();
        if rows.is_empty() {
            bail!(
                "the build for {target} has no kernel `{}` that the picture shows (the \
                 profile's kernels differ from the drawn graph)",
                unit.title
            );
        }
        time_us[index] = rows.iter().map(|r| r.time_us).sum();
    }
    Ok(svg::KernelTimes { time_us })
}
