//! The inode table and its upkeep.
//!
//! The kernel references an inode from each `lookup` reply until it sends `forget` for it;
//! the table holds exactly those. A zero entry lifetime does not make the kernel drop a dentry
//! (it revalidates it on the next walk, and keeps it until memory pressure if no walk comes),
//! so a path that vanished (an mdev removed, VFs disabled, a device unplugged) would stay
//! referenced, and its inode in the table, for as long as the kernel likes. The
//! [`Invalidator`] therefore tells the kernel, after each change of the model, which held
//! entries no longer exist (`FUSE_NOTIFY_INVAL_ENTRY`), as a network filesystem does when the
//! server removes a file; the kernel then drops those dentries and forgets their inodes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::{INodeNo, Notifier};

use crate::shared::Shared;

/// The `d_ino` a listing gives an entry that has no inode number yet: libfuse's
/// `FUSE_UNKNOWN_INO`. Numbers are handed out by `lookup` only, which the kernel counts and
/// later forgets; a listing takes no reference, so it names no new inode.
pub(crate) const UNKNOWN_INO: u64 = 0xffff_ffff;

/// One inode the kernel holds: its path and the lookups not yet forgotten.
#[derive(Debug)]
struct Inode {
    path: String,
    nlookup: u64,
}

/// Path <-> inode number table, holding exactly the inodes the kernel references.
///
/// Each `lookup` reply takes one reference (`nlookup`), each `forget` drops the count it
/// names, and an inode whose count reaches zero leaves the table (`fuse_lowlevel.h`: "inodes
/// acquire a single reference on each lookup, and lose nlookup references on each forget").
/// While referenced, a path keeps its number; a path looked up again after it was forgotten
/// gets a new one. Numbers are never reused, so a stale number never names another path and
/// generation 0 stays right.
#[derive(Debug)]
pub(crate) struct Inodes {
    by_path: HashMap<String, u64>,
    by_ino: HashMap<u64, Inode>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        Self {
            by_path: HashMap::new(),
            by_ino: HashMap::new(),
            next: 2,
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
    /// The paths held, each with its inode, sorted (a parent before its children).
    fn held(&self) -> Vec<(String, u64)> {
        let mut held: Vec<(String, u64)> = self
            .by_path
            .iter()
            .map(|(path, ino)| (path.clone(), *ino))
            .collect();
        held.sort_unstable();
        held
    }
}

/// The table, shared by the filesystem's threads and the [`Invalidator`].
pub(crate) type SharedInodes = Arc<Mutex<Inodes>>;

/// Locks the table; a panic elsewhere leaves it consistent (every change is one call).
pub(crate) fn lock(inodes: &SharedInodes) -> MutexGuard<'_, Inodes> {
    inodes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `held` paths that no longer `exist`, each as its parent's inode and its name, a parent
/// before its children. Invalidating the topmost drops what the kernel does not use below it;
/// an entry in use then (a file being written to `remove` its own device) stays reachable from
/// its parent's inode only, and is invalidated by its own entry. `held` is sorted, so an
/// ancestor comes before its descendants, whose existence is then not asked.
pub(crate) fn vanished(
    held: &[(String, u64)],
    mut exists: impl FnMut(&str) -> bool,
) -> Vec<(u64, String)> {
    let inode_of: HashMap<&str, u64> = held.iter().map(|(p, ino)| (p.as_str(), *ino)).collect();
    let mut gone: HashSet<&str> = HashSet::new();
    let mut entries = Vec::new();
    for (path, _) in held {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        if !gone.contains(parent) && exists(path) {
            continue;
        }
        gone.insert(path);
        let parent_ino = if parent.is_empty() {
            Some(1)
        } else {
            inode_of.get(parent).copied()
        };
        // The kernel holds no child whose parent it does not hold.
        if let Some(parent_ino) = parent_ino {
            entries.push((parent_ino, name.to_owned()));
        }
    }
    entries
}

/// Tells the kernel about held entries whose paths vanished, after each change of the model.
pub(crate) struct Invalidator {
    shared: Arc<Shared>,
    inodes: SharedInodes,
}

impl Invalidator {
    pub(crate) fn new(shared: Arc<Shared>, inodes: SharedInodes) -> Self {
        Self { shared, inodes }
    }

    /// Runs on a thread of its own until the host closes. The notifications go out from
    /// there, not from a request: the kernel takes the parent directory's lock to handle one,
    /// which a request being served may be waiting under.
    pub(crate) fn spawn(self, notifier: Notifier) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("vgpu-sim-inval".to_owned())
            .spawn(move || self.run(&notifier))
    }

    fn run(&self, notifier: &Notifier) {
        let mut seen = 0;
        while let Some(generation) = self.shared.wait_change(seen) {
            seen = generation;
            let held = lock(&self.inodes).held();
            for (parent, name) in vanished(&held, |path| self.shared.resolve(path).is_some()) {
                // ENOENT: the kernel dropped the entry already; anything else is reported.
                match notifier.inval_entry(INodeNo(parent), OsStr::new(&name)) {
                    Ok(()) => tracing::trace!(parent, name, "invalidated"),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => tracing::warn!(parent, name, "cannot invalidate the entry: {e}"),
                }
            }
        }
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
    fn vanished_lists_gone_entries_without_asking_below_them() {
        let held = vec![
            ("sys".to_owned(), 2),
            ("sys/m".to_owned(), 3),
            ("sys/m-x".to_owned(), 4),
            ("sys/m/remove".to_owned(), 5),
        ];
        let mut asked = Vec::new();
        let gone = vanished(&held, |p| {
            asked.push(p.to_owned());
            p != "sys/m"
        });
        assert_eq!(
            (gone, asked),
            (
                vec![(2, "m".to_owned()), (3, "remove".to_owned())],
                vec!["sys".to_owned(), "sys/m".to_owned(), "sys/m-x".to_owned()]
            )
        );
    }

    #[test]
    fn vanished_top_level_entry_has_root_parent() {
        let held = vec![("proc".to_owned(), 7)];
        assert_eq!(vanished(&held, |_| false), vec![(1, "proc".to_owned())]);
    }
}
