//! Progress on stderr for work that can take seconds (loading a big ONNX model, a build,
//! a run on an interpreter, benchmark measurements): an `indicatif` spinner with the
//! elapsed time, or a bar where the work is counted (kernel calls, measurements). Drawn
//! only when stderr is a terminal and `--quiet` is not given; otherwise every call here
//! does nothing, so piped output and logs never see it. Each indicator clears its line
//! when dropped, before the command prints its results.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether indicators are drawn; set once by [`init`].
static ENABLED: AtomicBool = AtomicBool::new(false);

/// How often a spinner redraws (and so how often its elapsed time moves).
const TICK: Duration = Duration::from_millis(100);

/// Turns progress on when stderr is a terminal and `quiet` is false.
pub fn init(quiet: bool) {
    ENABLED.store(!quiet && std::io::stderr().is_terminal(), Ordering::Relaxed);
}

/// One indicator on stderr, cleared when dropped; a no-op when progress is off.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A spinner saying `message`, with the time since it started.
    pub fn spinner(message: impl Into<String>) -> Progress {
        Progress::start(None, message.into(), "{spinner} {msg} ({elapsed})")
    }

    /// A bar saying `message`, with the count of steps done and the time so far; its
    /// length comes with the first [`Progress::set`].
    pub fn bar(message: impl Into<String>) -> Progress {
        Progress::start(
            Some(0),
            message.into(),
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})",
        )
    }

    fn start(len: Option<u64>, message: String, template: &str) -> Progress {
        if !ENABLED.load(Ordering::Relaxed) {
            return Progress(None);
        }
        let style = ProgressStyle::with_template(template)
            .expect("the templates above are valid")
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr())
            .with_style(style)
            .with_message(message);
        // Drawn at once, then kept moving while the work blocks this thread.
        bar.tick();
        bar.enable_steady_tick(TICK);
        Progress(Some(bar))
    }

    /// Sets how many of `total` steps are done (a spinner shows neither).
    pub fn set(&self, done: usize, total: usize) {
        if let Some(bar) = &self.0 {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// Runs `work` with a spinner saying `message`.
pub fn step<T>(message: impl Into<String>, work: impl FnOnce() -> T) -> T {
    let _spinner = Progress::spinner(message);
    work()
}
