//! The thread pool that runs parallel loops: `threads - 1` workers started with the
//! library and joined when it is dropped (no thread is spawned per run), plus the thread
//! that calls the kernel, which always works on its own loop too — so a call makes
//! progress even while every worker serves another executor's loop.
//!
//! A parallel loop is a [`Job`]: its iteration range is cut into chunks claimed with an
//! atomic counter. Jobs wait in a queue; idle workers block on a condition variable
//! (they never spin) and are woken when a job is queued.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::runtime::{BodyFn, CallCtx};

/// Stack size of worker threads: local buffers up to the stack limit of generated code
/// live on the stack.
const WORKER_STACK: usize = 16 << 20;

/// The pool of a compiled library.
#[derive(Debug)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    jobs: VecDeque<Arc<Job>>,
    shutdown: bool,
}

/// The raw pointers of one kernel call, valid while the job has unclaimed iterations.
#[derive(Debug)]
struct Task {
    body: BodyFn,
    args: *const *mut u8,
    ctx: *const CallCtx,
    env: *const u64,
    min: i64,
}

// SAFETY: the pointers refer to the calling thread's kernel call, which waits until every
// iteration has run before returning; generated code only reads them.
unsafe impl Send for Task {}
// SAFETY: as above.
unsafe impl Sync for Task {}

/// One parallel loop in flight.
#[derive(Debug)]
struct Job {
    task: Task,
    extent: i64,
    chunk: i64,
    next: AtomicI64,
    done: Mutex<i64>,
    finished: Condvar,
}

impl Job {
    /// Runs chunks until none is left to claim.
    fn work(&self) {
        loop {
            let s = self.next.fetch_add(self.chunk, Ordering::Relaxed);
            if s >= self.extent {
                return;
            }
            let e = (s + self.chunk).min(self.extent);
            let t = &self.task;
            // SAFETY: iterations s..e are claimed by this thread alone, and the caller
            // keeps the pointers alive until all iterations are done.
            unsafe { (t.body)(t.args, t.ctx, t.env, t.min + s, t.min + e) };
            let mut done = lock(&self.done);
            *done += e - s;
            if *done >= self.extent {
                self.finished.notify_all();
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.extent
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Generated code does not panic; a poisoned lock still holds consistent counters.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// A pool running loops on `threads` threads (the caller's and `threads - 1`
    /// workers). Fails only if the OS refuses to start a thread.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared::default());
        let mut workers = vec![];
        for i in 1..threads {
            let s = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("kiln-cpu-{i}"))
                .stack_size(WORKER_STACK)
                .spawn(move || worker(&s));
            match h {
                Ok(h) => workers.push(h),
                Err(e) => {
                    let p = Pool {
                        shared,
                        workers,
                        threads,
                    };
                    drop(p);
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            workers,
            threads,
        })
    }

    /// How many threads run a loop.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `body` over iterations `min..min + extent`, returning when all have run.
    pub fn parallel_for(
        &self,
        body: BodyFn,
        args: *const *mut u8,
        ctx: *const CallCtx,
        env: *const u64,
        min: i64,
        extent: i64,
    ) {
        if extent <= 0 {
            return;
        }
        let pieces = (self.threads as i64) * 4;
        let chunk = ((extent + pieces - 1) / pieces).max(1);
        if self.workers.is_empty() || chunk >= extent {
            // SAFETY: the caller's pointers are live for this call.
            unsafe { body(args, ctx, env, min, min + extent) };
            return;
        }
        let job = Arc::new(Job {
            task: Task {
                body,
                args,
                ctx,
                env,
                min,
            },
            extent,
            chunk,
            next: AtomicI64::new(0),
            done: Mutex::new(0),
            finished: Condvar::new(),
        });
        {
            let mut st = lock(&self.shared.state);
            st.jobs.push_back(Arc::clone(&job));
        }
        self.shared.wake.notify_all();
        job.work();
        let mut done = lock(&job.done);
        while *done < extent {
            done = job.finished.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        drop(done);
        let mut st = lock(&self.shared.state);
        st.jobs.retain(|j| !Arc::ptr_eq(j, &job));
    }
}

fn worker(s: &Shared) {
    loop {
        let job = {
            let mut st = lock(&s.state);
            loop {
                if st.shutdown {
                    return;
                }
                while st.jobs.front().is_some_and(|j| j.exhausted()) {
                    st.jobs.pop_front();
                }
                if let Some(j) = st.jobs.front() {
                    break Arc::clone(j);
                }
                st = s.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        job.work();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
