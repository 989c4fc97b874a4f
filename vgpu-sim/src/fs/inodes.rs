//! The inode table.
//!
//! Each `lookup` reply takes one reference to an inode (`nlookup`), each `forget` drops the
//! count it names, and an inode whose count reaches zero leaves the table (`fuse_lowlevel.h`:
//! "inodes acquire a single reference on each lookup, and lose nlookup references on each
//! forget"). A zero entry lifetime does not make the kernel let go of a dentry: it revalidates
//! it at the next walk and otherwise keeps it until memory pressure, so the inodes of paths
//! that vanished (an mdev removed, VFs disabled, a device unplugged) would stay referenced for
//! as long as the kernel likes. A sweep, run when the table has doubled since the last one,
//! therefore drops the entries whose paths no longer exist and that no open file uses: what
//! the kernel may still send for them is a revalidating `lookup` below them or a `getattr`,
//! which are answered `ENOENT` as before (the path did not resolve), and their `forget`, which
//! is ignored. An open file keeps its entry, so that its reads and writes still answer
//! `ENODEV` (or `ESRCH` under `proc/`). Numbers are never reused, so a dropped number never
//! names another path.

use std::collections::HashMap;

/// The `d_ino` a listing gives an entry that has no inode number yet: libfuse's
/// `FUSE_UNKNOWN_INO`. Numbers are handed out by `lookup` only, which the kernel counts and
/// later forgets; a listing takes no reference, so it names no new inode.
pub(crate) const UNKNOWN_INO: u64 = 0xffff_ffff;

/// The smallest table that is swept.
const SWEEP_MIN: usize = 64;

/// One inode the kernel holds: its path and the lookups not yet forgotten.
#[derive(Debug)]
struct Inode {
    path: String,
    nlookup: u64,
    /// Files open on it (`open` replies not yet released).
    opened: u64,
}

/// Path <-> inode number table: the inodes the kernel references, less those swept.
#[derive(Debug)]
pub(crate) struct Inodes {
    by_path: HashMap<String, u64>,
    by_ino: HashMap<u64, Inode>,
    next: u64,
    /// The size at which the next sweep runs.
    sweep_at: usize,
}

impl Default for Inodes {
    fn default() -> Self {
        Self {
            by_path: HashMap::new(),
            by_ino: HashMap::new(),
            next: 2,
            sweep_at: SWEEP_MIN,
        }
    }
}

impl Inodes {
    /// The inode of `path` for a `lookup` reply, with one more reference.
    pub(crate) fn lookup(&mut self, path: &str) -> u64 {
        if path.is_empty() {
            return 1;
        }
        if let Some(ino) = self.by_path.get(path) {
            if let Some(inode) = self.by_ino.get_mut(ino) {
                inode.nlookup = inode.nlookup.saturating_add(1);
            }
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        if self.next == UNKNOWN_INO {
            self.next += 1;
        }
        self.by_path.insert(path.to_owned(), ino);
        self.by_ino.insert(
            ino,
            Inode {
                path: path.to_owned(),
                nlookup: 1,
                opened: 0,
            },
        );
        ino
    }

    /// Drops `nlookup` references to `ino`; the last one removes it. The root is never
    /// forgotten.
    pub(crate) fn forget(&mut self, ino: u64, nlookup: u64) {
        let Some(inode) = self.by_ino.get_mut(&ino) else {
            return;
        };
        inode.nlookup = inode.nlookup.saturating_sub(nlookup);
        if inode.nlookup > 0 {
            return;
        }
        if let Some(inode) = self.by_ino.remove(&ino) {
            self.by_path.remove(&inode.path);
        }
    }

    /// The number of `path` for a listing: its inode when the kernel holds one, otherwise
    /// [`UNKNOWN_INO`]. Takes no reference.
    pub(crate) fn listed(&self, path: &str) -> u64 {
        if path.is_empty() {
            return 1;
        }
        self.by_path.get(path).copied().unwrap_or(UNKNOWN_INO)
    }

    pub(crate) fn path(&self, ino: u64) -> Option<String> {
        if ino == 1 {
            return Some(String::new());
        }
        self.by_ino.get(&ino).map(|inode| inode.path.clone())
    }

    /// The inodes held, the root not counted.
    pub(crate) fn live(&self) -> usize {
        self.by_ino.len()
    }
}

impl Inodes {
    /// Counts a file opened on `ino`.
    pub(crate) fn open(&mut self, ino: u64) {
        if let Some(inode) = self.by_ino.get_mut(&ino) {
            inode.opened = inode.opened.saturating_add(1);
        }
    }

    /// Counts a file on `ino` closed (`release`).
    pub(crate) fn release(&mut self, ino: u64) {
        if let Some(inode) = self.by_ino.get_mut(&ino) {
            inode.opened = inode.opened.saturating_sub(1);
        }
    }

    /// Whether the table has doubled since the last sweep (and holds at least [`SWEEP_MIN`]).
    pub(crate) fn sweep_due(&self) -> bool {
        self.by_ino.len() >= self.sweep_at
    }

    /// Drops the entries whose paths no longer `exist` and that no open file uses; the next
    /// sweep is due when the table has doubled.
    pub(crate) fn sweep(&mut self, mut exists: impl FnMut(&str) -> bool) {
        let gone: Vec<u64> = self
            .by_ino
            .iter()
            .filter(|(_, inode)| inode.opened == 0 && !exists(&inode.path))
            .map(|(ino, _)| *ino)
            .collect();
        for ino in gone {
            if let Some(inode) = self.by_ino.remove(&ino) {
                self.by_path.remove(&inode.path);
            }
        }
        self.sweep_at = (self.by_ino.len() * 2).max(SWEEP_MIN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_same_path_twice_is_one_inode() {
        let mut t = Inodes::default();
        assert_eq!((t.lookup("sys"), t.lookup("sys"), t.live()), (2, 2, 1));
    }

    #[test]
    fn forget_fewer_than_looked_up_keeps_inode() {
        let mut t = Inodes::default();
        let ino = t.lookup("sys");
        t.lookup("sys");
        t.forget(ino, 1);
        assert_eq!(t.path(ino), Some("sys".to_owned()));
    }

    #[test]
    fn forget_every_lookup_drops_inode() {
        let mut t = Inodes::default();
        let ino = t.lookup("sys");
        t.lookup("sys");
        t.forget(ino, 2);
        assert_eq!(
            (t.path(ino), t.live(), t.listed("sys")),
            (None, 0, UNKNOWN_INO)
        );
    }

    #[test]
    fn lookup_after_forget_is_new_number() {
        let mut t = Inodes::default();
        let first = t.lookup("sys");
        t.forget(first, 1);
        assert_eq!(t.lookup("sys"), first + 1);
    }

    #[test]
    fn forget_unknown_inode_is_ignored() {
        let mut t = Inodes::default();
        t.lookup("sys");
        t.forget(99, 1);
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn listed_held_path_is_its_inode() {
        let mut t = Inodes::default();
        let ino = t.lookup("sys/bus");
        assert_eq!((t.listed("sys/bus"), t.listed(""), t.live()), (ino, 1, 1));
    }

    #[test]
    fn sweep_drops_vanished_paths_only() {
        let mut t = Inodes::default();
        let kept = t.lookup("sys/bus");
        let gone = t.lookup("sys/bus/mdev/devices/u");
        t.sweep(|p| p == "sys/bus");
        assert_eq!(
            (t.path(kept).is_some(), t.path(gone), t.live()),
            (true, None, 1)
        );
    }

    #[test]
    fn sweep_keeps_vanished_path_with_open_file() {
        let mut t = Inodes::default();
        let ino = t.lookup("sys/devices/u/remove");
        t.open(ino);
        t.sweep(|_| false);
        assert_eq!(t.path(ino), Some("sys/devices/u/remove".to_owned()));
    }

    #[test]
    fn sweep_drops_vanished_path_once_its_file_is_released() {
        let mut t = Inodes::default();
        let ino = t.lookup("sys/devices/u/remove");
        t.open(ino);
        t.release(ino);
        t.sweep(|_| false);
        assert_eq!(t.path(ino), None);
    }

    #[test]
    fn sweep_due_after_table_doubles() {
        let mut t = Inodes::default();
        for i in 0..40 {
            t.lookup(&format!("sys/{i}"));
        }
        t.sweep(|_| true);
        let due_before = t.sweep_due();
        for i in 40..80 {
            t.lookup(&format!("sys/{i}"));
        }
        assert_eq!((due_before, t.sweep_due()), (false, true));
    }
}
