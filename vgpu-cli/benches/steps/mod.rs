//! A profile by step for the benchmarks: each span of `vgpu-core` (a function with a trace
//! span) is charged the simulated-kernel operations made while it was entered, and the time
//! it took, less what the spans inside it made and took.
//!
//! The layer is the process's global subscriber, so that the threads `vgpu-core` starts
//! (one per GPU) are profiled too. Operations are counted for the whole host: a step of one
//! thread is charged what the other threads made meanwhile. They are exact for one thread.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::span;
use tracing_subscriber::{Layer, filter::filter_fn, layer::Context, prelude::*};
use vgpu_sim::{Counters, FsOp, SimHost};

/// What a step made and took by itself, over its calls.
#[derive(Default)]
pub(crate) struct Step {
    /// Operations per kind, in `FsOp::ALL`'s order.
    pub(crate) ops: [u64; 8],
    pub(crate) calls: u64,
    pub(crate) took: Duration,
}

/// The steps, by `module::function`.
pub(crate) type Steps = BTreeMap<String, Step>;

type Reader = Box<dyn Fn() -> Counters + Send + Sync>;

/// The installed profile: what it reads the counts from, and what it has gathered.
pub(crate) struct Profiler {
    reader: Arc<Mutex<Option<Reader>>>,
    steps: Arc<Mutex<Steps>>,
}

thread_local! {
    /// The spans entered on this thread and not yet left.
    static OPEN: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

/// A span entered: the counts and time at entry, and what the spans inside it made and took.
struct Entered {
    at: [u64; 8],
    since: Instant,
    inner: [u64; 8],
    inner_time: Duration,
}

struct Layered {
    reader: Arc<Mutex<Option<Reader>>>,
    steps: Arc<Mutex<Steps>>,
}

impl Layered {
    fn now(&self) -> [u64; 8] {
        match &*self.reader.lock().unwrap() {
            Some(read) => {
                let counters = read();
                FsOp::ALL.map(|op| counters.get(op))
            }
            None => [0; 8],
        }
    }
}

impl<S> Layer<S> for Layered
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_enter(&self, _id: &span::Id, _ctx: Context<'_, S>) {
        let at = self.now();
        OPEN.with(|open| {
            open.borrow_mut().push(Entered {
                at,
                since: Instant::now(),
                inner: [0; 8],
                inner_time: Duration::ZERO,
            });
        });
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        let now = self.now();
        let Some(entered) = OPEN.with(|open| open.borrow_mut().pop()) else {
            return;
        };
        let took = entered.since.elapsed();
        let spent: [u64; 8] = std::array::from_fn(|k| now[k].saturating_sub(entered.at[k]));
        OPEN.with(|open| {
            if let Some(outer) = open.borrow_mut().last_mut() {
                for (inner, n) in outer.inner.iter_mut().zip(spent) {
                    *inner += n;
                }
                outer.inner_time += took;
            }
        });
        let Some(span) = ctx.span(id) else { return };
        let meta = span.metadata();
        let module = meta.target().trim_start_matches("vgpu_core::");
        let mut steps = self.steps.lock().unwrap();
        let step = steps
            .entry(format!("{module}::{}", meta.name()))
            .or_default();
        for ((own, spent), inner) in step.ops.iter_mut().zip(spent).zip(entered.inner) {
            *own += spent.saturating_sub(inner);
        }
        step.calls += 1;
        step.took += took.saturating_sub(entered.inner_time);
    }
}

impl Profiler {
    /// Installs the profile as the global subscriber; it counts nothing until told a host.
    pub(crate) fn install() -> Self {
        let reader = Arc::new(Mutex::new(None));
        let steps = Arc::new(Mutex::new(Steps::new()));
        let layer = Layered {
            reader: Arc::clone(&reader),
            steps: Arc::clone(&steps),
        }
        .with_filter(filter_fn(|meta| {
            meta.is_span() && meta.target().starts_with("vgpu_core")
        }));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .unwrap();
        Self { reader, steps }
    }

    /// Counts `host`'s operations from now, and forgets what was gathered.
    pub(crate) fn watch(&self, host: &SimHost) {
        *self.reader.lock().unwrap() = Some(Box::new(host.counter_reader()));
        self.steps.lock().unwrap().clear();
    }

    /// What was gathered since [`Profiler::watch`].
    pub(crate) fn take(&self) -> Steps {
        std::mem::take(&mut *self.steps.lock().unwrap())
    }
}

/// Prints `steps`, most operations (then most time) first; each step's time divided by
/// `per` (the threads it ran on, say).
pub(crate) fn print(steps: &Steps, per: u32) {
    let mut rows: Vec<_> = steps.iter().collect();
    rows.sort_by_key(|(_, s)| std::cmp::Reverse((s.ops.iter().sum::<u64>(), s.took)));
    let kinds: String = FsOp::ALL
        .iter()
        .map(|op| format!("{:>9}", op.name()))
        .collect();
    println!("  {:>6}  {:>9}  {:>5}{kinds}  step", "ops", "ms", "calls");
    for (name, step) in rows {
        let each: String = step.ops.iter().map(|n| format!("{n:>9}")).collect();
        println!(
            "  {:>6}  {:>9.2}  {:>5}{each}  {name}",
            step.ops.iter().sum::<u64>(),
            step.took.as_secs_f64() * 1e3 / f64::from(per),
            step.calls
        );
    }
}
