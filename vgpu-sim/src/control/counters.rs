//! The FUSE operation counters (`.vgpu-sim/counters`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::FsOp;

/// Operation counts served by the filesystem since mount or the last reset, and the inodes
/// the kernel holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    counts: [u64; 8],
    inodes: u64,
}

impl Counters {
    /// The count of one operation.
    pub fn get(&self, op: FsOp) -> u64 {
        self.counts[op.index()]
    }

    /// The sum over all operations.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The inodes in the table now (looked up, not yet forgotten, not swept), the root not
    /// counted; a reset leaves it alone.
    pub fn inodes(&self) -> u64 {
        self.inodes
    }

    /// The text of `.vgpu-sim/counters`: `lookup N\ngetattr N\n...readdir N\ninodes N\n`.
    pub fn render(&self) -> String {
        let mut text: String = FsOp::ALL
            .iter()
            .map(|op| format!("{} {}\n", op.name(), self.get(*op)))
            .collect();
        text.push_str(&format!("inodes {}\n", self.inodes));
        text
    }
}

/// Lock-free live counters.
#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    counts: [AtomicU64; 8],
    inodes: AtomicU64,
}

impl LiveCounters {
    pub(crate) fn bump(&self, op: FsOp) {
        self.counts[op.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Records how many inodes the kernel holds now.
    pub(crate) fn set_inodes(&self, live: usize) {
        self.inodes
            .store(u64::try_from(live).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counters {
        let mut c = Counters::default();
        for (i, a) in self.counts.iter().enumerate() {
            c.counts[i] = a.load(Ordering::Relaxed);
        }
        c.inodes = self.inodes.load(Ordering::Relaxed);
        c
    }

    pub(crate) fn reset(&self) {
        for a in &self.counts {
            a.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_lists_every_op() {
        assert_eq!(
            Counters::default().render(),
            "lookup 0\ngetattr 0\nsetattr 0\nreadlink 0\nopen 0\nread 0\nwrite 0\nreaddir 0\n\
             inodes 0\n"
        );
    }
}
