//! One thread per GPU: how [`provision`](super::provision) and [`apply`](super::apply) run
//! their GPUs at once without an async runtime.
//!
//! The threads are scoped to the call ([`std::thread::scope`]), so they borrow the session,
//! the plan and the caller's progress callback, and every one of them has ended before the
//! call returns (and so before the session releases the host lock), even when one panicked.
//! A thread that panicked has unwound through its operation, which undid its steps (see
//! `session`); the call then fails with [`Error::TaskLost`], after the other GPUs finished.
//! Where the system refuses another thread, that GPU's work runs on the calling thread
//! instead, when the joins reach it, while the threads started after it still run: the same
//! work, less of it at once.

use std::panic::AssertUnwindSafe;

use crate::error::{Error, Result};

/// The name of each GPU's thread, as panics and debuggers show it.
pub(super) const THREAD_NAME: &str = "vgpu-gpu-task";

/// Runs `work` on every item of `items`, each on its own thread, all at once; returns what it
/// returned, in the order of `items`. `what` names the operation in [`Error::TaskLost`]. The
/// threads are named [`THREAD_NAME`].
pub(super) fn each_gpu<T, R>(
    what: &'static str,
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
{
    let work = &work;
    std::thread::scope(|scope| {
        let threads: Vec<_> = items
            .iter()
            .map(|item| {
                std::thread::Builder::new()
                    .name(THREAD_NAME.to_owned())
                    .spawn_scoped(scope, move || work(item))
            })
            .collect();
        // Every thread is joined before the lock goes, even when one of them died.
        let mut results = Vec::with_capacity(items.len());
        let mut lost = None;
        for (item, thread) in items.iter().zip(threads) {
            let outcome = match thread {
                Ok(thread) => thread.join(),
                Err(err) => {
                    tracing::warn!(
                        "cannot start a thread for a {what} task, running it here: {err}"
                    );
                    std::panic::catch_unwind(AssertUnwindSafe(|| work(item)))
                }
            };
            match outcome {
                Ok(result) => results.push(result),
                Err(panic) => {
                    lost.get_or_insert_with(|| panic_message(panic.as_ref()));
                }
            }
        }
        match lost {
            Some(reason) => Err(Error::TaskLost { what, reason }),
            None => Ok(results),
        }
    })
}

/// What a panic said, as `panicked: <message>`.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    match message {
        Some(message) => format!("panicked: {message}"),
        None => "panicked".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gpu_returns_results_in_item_order() {
        let items = [3_u32, 1, 2];
        let results = each_gpu("test", &items, |n| n * 10).unwrap();
        assert_eq!(results, [30, 10, 20]);
    }

    #[test]
    fn each_gpu_runs_every_item_on_its_own_named_thread() {
        let items = [(); 3];
        let threads = each_gpu("test", &items, |()| {
            let thread = std::thread::current();
            (thread.id(), thread.name().map(str::to_owned))
        })
        .unwrap();
        let mut ids: Vec<_> = threads.iter().map(|(id, _)| *id).collect();
        ids.push(std::thread::current().id());
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        let names: Vec<_> = threads.into_iter().map(|(_, name)| name).collect();
        assert_eq!(
            (ids.len(), names),
            (4, vec![Some(THREAD_NAME.to_owned()); 3])
        );
    }

    #[test]
    fn each_gpu_with_a_panicking_item_finishes_the_others_and_is_task_lost() {
        let done = std::sync::atomic::AtomicUsize::new(0);
        let items = [1_u32, 2, 3];
        let err = each_gpu("test", &items, |n| {
            if *n == 2 {
                panic!("item {n} broke");
            }
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap_err();
        assert_eq!(
            (err.to_string(), done.into_inner()),
            (
                "a test task did not finish: panicked: item 2 broke".to_owned(),
                2
            )
        );
    }
}
