//! Stopping a command between steps: after SIGINT or SIGTERM the step in flight finishes,
//! no new one starts, and each unfinished operation is undone through its own undo.
//!
//! A signal handler is process-wide, so the request is too: [`request_stop`] records the
//! first signal, and every [`Operation`](super::session::Operation) checks it after each step
//! it takes and at its start. A step that sees it fails with [`Error::Interrupted`], and the
//! operation rolls back as for any failure. The library installs no handler: the caller
//! (`vgpuctl`) turns signals into [`request_stop`].

use std::sync::atomic::{AtomicI32, Ordering};

use crate::error::{Error, Result};

/// The first signal asked to stop, 0 for none.
static STOP: AtomicI32 = AtomicI32::new(0);

/// Asks every operation in progress to stop after its step in flight and undo itself;
/// `signal` (`SIGINT` = 2, `SIGTERM` = 15) is named in the error. The first request counts.
pub fn request_stop(signal: i32) {
    let _first = STOP.compare_exchange(0, signal.max(1), Ordering::SeqCst, Ordering::SeqCst);
}

/// The signal a stop was requested with, if one was.
pub fn stop_requested() -> Option<i32> {
    match STOP.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Fails with [`Error::Interrupted`] once a stop is requested.
pub(crate) fn check() -> Result<()> {
    match stop_requested() {
        Some(signal) => Err(Error::Interrupted { signal }),
        None => Ok(()),
    }
}
