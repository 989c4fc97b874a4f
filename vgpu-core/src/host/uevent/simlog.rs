//! Following a simulated host's uevent log, `.vgpu-sim/uevents`: the kernel model's events
//! since boot, oldest first, each with its sequence number. The log is re-read and the lines
//! past the last sequence number seen are the new events (it keeps the newest 16384; a
//! `uevents-clear` empties it while the numbers go on).

use std::path::PathBuf;
use std::time::Duration;

use super::Uevent;
use crate::error::Result;
use crate::host::sysfs;

/// Where the follower is in a simulator's log.
#[derive(Debug)]
pub(crate) struct SimLog {
    path: PathBuf,
    last: u64,
}

impl SimLog {
    /// Follows the log at `path` from its current end.
    pub(crate) fn open(path: PathBuf) -> Result<Self> {
        let mut log = Self { path, last: 0 };
        log.last = log.read()?.last().map_or(0, |e| e.seqnum);
        Ok(log)
    }

    /// Every event in the log, oldest first.
    fn read(&self) -> Result<Vec<Uevent>> {
        let text = sysfs::read_bounded(&self.path, sysfs::PROC_LIMIT)?
            .ok_or_else(|| sysfs::missing(&self.path))?;
        text.lines()
            .map(|line| {
                Uevent::parse_line(line).map_err(|_| {
                    sysfs::parse_error(
                        &self.path,
                        line,
                        "a uevent: <seqnum> <action> <devpath> <subsystem> KEY=VALUE...",
                    )
                })
            })
            .collect()
    }

    /// The events logged since the last call, waiting up to `timeout` for the first (the log
    /// is re-read with the growing interval of [`sysfs::poll_until`]).
    pub(crate) fn receive(&mut self, timeout: Duration) -> Result<Vec<Uevent>> {
        let mut new = Vec::new();
        sysfs::poll_until(timeout, || {
            new = self
                .read()?
                .into_iter()
                .filter(|e| e.seqnum > self.last)
                .collect();
            Ok(!new.is_empty())
        })?;
        if let Some(last) = new.last() {
            self.last = last.seqnum;
        }
        Ok(new)
    }
}
