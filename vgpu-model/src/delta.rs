//! What changed in one GPU between two readings: the GPU, VFs and vGPUs that appeared or went,
//! and the facts that changed on those present in both. Pure; for event consumers that keep
//! an inventory and re-read one GPU per event.

use serde::Serialize;

use super::{Gpu, Vf, Vgpu};

/// The kind of object a delta entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeltaKind {
    /// A GPU physical function (`id` is its PCI address).
    Gpu,
    /// A VF (`id` is its PCI address).
    Vf,
    /// A vGPU (`id` is its handle: an mdev UUID or a VF's address).
    Vgpu,
}

/// An object that appeared or went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeltaItem {
    /// What it is.
    pub kind: DeltaKind,
    /// Its id.
    pub id: String,
}

/// One fact that changed on an object present in both readings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeltaChange {
    /// What it is.
    pub kind: DeltaKind,
    /// Its id.
    pub id: String,
    /// The fact: `driver`, `backend` or `num_vfs` of a GPU, `driver` or `vgpu_type` of a VF,
    /// `type` or `parent` of a vGPU.
    pub field: &'static str,
    /// The value before (`None`: none, such as no driver).
    pub from: Option<String>,
    /// The value after.
    pub to: Option<String>,
}

/// What changed in one GPU, each list in a stable order (the GPU, then its VFs by address,
/// then its vGPUs by handle).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InventoryDelta {
    /// What appeared.
    pub added: Vec<DeltaItem>,
    /// What went.
    pub removed: Vec<DeltaItem>,
    /// What changed.
    pub changed: Vec<DeltaChange>,
}

impl InventoryDelta {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// The change from `before` to `after`, two readings of one GPU; `None` is a GPU that is
    /// not there (not yet, or no longer): everything on the other side was added or removed.
    pub fn between(before: Option<&Gpu>, after: Option<&Gpu>) -> Self {
        let mut delta = Self::default();
        match (before, after) {
            (None, None) => {}
            (None, Some(gpu)) => delta.added = everything(gpu),
            (Some(gpu), None) => delta.removed = everything(gpu),
            (Some(old), Some(new)) => delta.compare(old, new),
        }
        delta
    }

    fn compare(&mut self, old: &Gpu, new: &Gpu) {
        let id = old.address.to_string();
        self.change(DeltaKind::Gpu, &id, "driver", &old.driver, &new.driver);
        let backend = |g: &Gpu| Some(g.backend.to_string());
        self.change(DeltaKind::Gpu, &id, "backend", &backend(old), &backend(new));
        let num_vfs = |g: &Gpu| g.sriov.as_ref().map(|s| s.num_vfs.to_string());
        self.change(DeltaKind::Gpu, &id, "num_vfs", &num_vfs(old), &num_vfs(new));

        let (old_vfs, new_vfs) = (
            sorted(&old.vfs, |v| v.address),
            sorted(&new.vfs, |v| v.address),
        );
        for vf in &old_vfs {
            match new_vfs.iter().find(|n| n.address == vf.address) {
                None => self.removed.push(item(DeltaKind::Vf, vf.address)),
                Some(now) => {
                    let id = vf.address.to_string();
                    self.change(DeltaKind::Vf, &id, "driver", &vf.driver, &now.driver);
                    self.change(
                        DeltaKind::Vf,
                        &id,
                        "vgpu_type",
                        &vf.vgpu_type,
                        &now.vgpu_type,
                    );
                }
            }
        }
        for vf in new_vfs
            .iter()
            .filter(|n| !old_vfs.iter().any(|o| o.address == n.address))
        {
            self.added.push(item(DeltaKind::Vf, vf.address));
        }

        let (old_vgpus, new_vgpus) = (sorted(&old.vgpus, |v| v.id), sorted(&new.vgpus, |v| v.id));
        for vgpu in &old_vgpus {
            match new_vgpus.iter().find(|n| n.id == vgpu.id) {
                None => self.removed.push(item(DeltaKind::Vgpu, vgpu.id)),
                Some(now) => {
                    let id = vgpu.id.to_string();
                    let ty = |v: &Vgpu| Some(v.type_id.clone());
                    self.change(DeltaKind::Vgpu, &id, "type", &ty(vgpu), &ty(now));
                    let parent = |v: &Vgpu| Some(v.parent.to_string());
                    self.change(DeltaKind::Vgpu, &id, "parent", &parent(vgpu), &parent(now));
                }
            }
        }
        for vgpu in new_vgpus
            .iter()
            .filter(|n| !old_vgpus.iter().any(|o| o.id == n.id))
        {
            self.added.push(item(DeltaKind::Vgpu, vgpu.id));
        }
    }

    fn change(
        &mut self,
        kind: DeltaKind,
        id: &str,
        field: &'static str,
        from: &Option<String>,
        to: &Option<String>,
    ) {
        if from != to {
            self.changed.push(DeltaChange {
                kind,
                id: id.to_owned(),
                field,
                from: from.clone(),
                to: to.clone(),
            });
        }
    }
}

fn item(kind: DeltaKind, id: impl ToString) -> DeltaItem {
    DeltaItem {
        kind,
        id: id.to_string(),
    }
}

fn sorted<T, K: Ord>(items: &[T], key: impl Fn(&T) -> K) -> Vec<&T> {
    let mut list: Vec<&T> = items.iter().collect();
    list.sort_by_key(|t| key(t));
    list
}

/// The GPU, its VFs and its vGPUs, as items.
fn everything(gpu: &Gpu) -> Vec<DeltaItem> {
    let mut items = vec![item(DeltaKind::Gpu, gpu.address)];
    items.extend(
        sorted(&gpu.vfs, |v: &Vf| v.address)
            .iter()
            .map(|v| item(DeltaKind::Vf, v.address)),
    );
    items.extend(
        sorted(&gpu.vgpus, |v: &Vgpu| v.id)
            .iter()
            .map(|v| item(DeltaKind::Vgpu, v.id)),
    );
    items
}

#[cfg(test)]
mod tests;
