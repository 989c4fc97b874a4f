//! Simulated processes holding files open, as `proc/<pid>/comm` and `proc/<pid>/fd/<n>` show
//! them (`fs/proc/base.c`, `fs/proc/fd.c`): what a tool reads to know who has a VFIO device
//! open.

use std::collections::BTreeMap;

use crate::control::{Hold, MAX_HELD_FDS};
use crate::error::Errno;

/// The first descriptor `hold` gives (0 to 2 are the standard streams).
const FIRST_FD: u32 = 3;

/// One simulated process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Process {
    /// `comm`, without the newline.
    pub(crate) comm: String,
    /// Descriptor -> link target.
    pub(crate) fds: BTreeMap<u32, String>,
}

/// Every simulated process, by pid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Processes {
    procs: BTreeMap<u32, Process>,
    held: usize,
}

impl Processes {
    /// Gives `h.pid` (created with `h.comm` when new) one more descriptor pointing to
    /// `h.target`: the lowest free one from 3. `EINVAL` when the process exists with another
    /// name or [`MAX_HELD_FDS`] descriptors are held already.
    pub(crate) fn hold(&mut self, h: &Hold) -> Result<u32, (String, Errno)> {
        if let Some(p) = self.procs.get(&h.pid).filter(|p| p.comm != h.comm) {
            return Err((
                format!("process {} is named {:?}, not {:?}", h.pid, p.comm, h.comm),
                libc::EINVAL,
            ));
        }
        if self.held >= MAX_HELD_FDS {
            return Err((
                format!("more than {MAX_HELD_FDS} descriptors held"),
                libc::EINVAL,
            ));
        }
        let p = self.procs.entry(h.pid).or_insert_with(|| Process {
            comm: h.comm.clone(),
            fds: BTreeMap::new(),
        });
        let fd = (FIRST_FD..=u32::MAX)
            .find(|n| !p.fds.contains_key(n))
            .unwrap_or(u32::MAX);
        p.fds.insert(fd, h.target.clone());
        self.held += 1;
        Ok(fd)
    }

    /// Ends a process with its descriptors; `ESRCH` when there is none.
    pub(crate) fn end(&mut self, pid: u32) -> Result<(), (String, Errno)> {
        let p = self
            .procs
            .remove(&pid)
            .ok_or_else(|| (format!("no process {pid}"), libc::ESRCH))?;
        self.held -= p.fds.len();
        Ok(())
    }

    /// Ends every process.
    pub(crate) fn clear(&mut self) {
        self.procs.clear();
        self.held = 0;
    }

    /// A process, if it runs.
    pub(crate) fn get(&self, pid: u32) -> Option<&Process> {
        self.procs.get(&pid)
    }

    /// Whether no process runs.
    pub(crate) fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// (pid, comm, target) of every descriptor whose target is one of `nodes`, by pid.
    pub(crate) fn holding(&self, nodes: &[String]) -> Vec<(u32, String, String)> {
        let mut found = Vec::new();
        for (pid, p) in &self.procs {
            for target in p.fds.values().filter(|t| nodes.contains(t)) {
                found.push((*pid, p.comm.clone(), target.clone()));
            }
        }
        found
    }

    /// The running pids, ascending.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(pid: u32, comm: &str, target: &str) -> Hold {
        Hold::new(pid, comm, target).expect("valid hold")
    }

    #[test]
    fn hold_new_process_gets_fd_3() {
        let mut p = Processes::default();
        assert_eq!(p.hold(&hold(42, "qemu", "/dev/vfio/7")), Ok(3));
    }

    #[test]
    fn hold_second_file_gets_fd_4() {
        let mut p = Processes::default();
        p.hold(&hold(42, "qemu", "/dev/vfio/7")).expect("first");
        assert_eq!(p.hold(&hold(42, "qemu", "/dev/vfio/devices/vfio0")), Ok(4));
    }

    #[test]
    fn hold_existing_pid_other_name_is_einval() {
        let mut p = Processes::default();
        p.hold(&hold(42, "qemu", "/dev/vfio/7")).expect("first");
        assert_eq!(
            p.hold(&hold(42, "bash", "/dev/vfio/7")).map_err(|(_, e)| e),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn hold_beyond_limit_is_einval() {
        let mut p = Processes::default();
        for pid in 1..=u32::try_from(MAX_HELD_FDS).expect("fits") {
            p.hold(&hold(pid, "qemu", "/dev/vfio/7")).expect("fits");
        }
        assert_eq!(
            p.hold(&hold(99_999, "qemu", "/dev/vfio/7"))
                .map_err(|(_, e)| e),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn end_frees_its_descriptors_for_others() {
        let mut p = Processes::default();
        for pid in 1..=u32::try_from(MAX_HELD_FDS).expect("fits") {
            p.hold(&hold(pid, "qemu", "/dev/vfio/7")).expect("fits");
        }
        p.end(1).expect("running");
        assert_eq!(p.hold(&hold(99_999, "qemu", "/dev/vfio/7")), Ok(3));
    }

    #[test]
    fn end_unknown_pid_is_esrch() {
        let mut p = Processes::default();
        assert_eq!(p.end(42).map_err(|(_, e)| e), Err(libc::ESRCH));
    }

    #[test]
    fn holding_lists_matching_descriptors_only() {
        let mut p = Processes::default();
        p.hold(&hold(42, "qemu", "/dev/vfio/7")).expect("first");
        p.hold(&hold(42, "qemu", "/dev/null")).expect("second");
        assert_eq!(
            p.holding(&["/dev/vfio/7".to_owned()]),
            vec![(42, "qemu".to_owned(), "/dev/vfio/7".to_owned())]
        );
    }

    #[test]
    fn clear_ends_every_process() {
        let mut p = Processes::default();
        p.hold(&hold(42, "qemu", "/dev/vfio/7")).expect("first");
        p.clear();
        assert_eq!(p, Processes::default());
    }
}
