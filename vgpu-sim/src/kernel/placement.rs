//! NVIDIA's mixed-size (heterogeneous) mode of time-sliced vGPUs, owned by the simulated
//! driver: the mode of each GPU that supports it and the place each vGPU takes on it
//! (NVIDIA Virtual GPU Software User Guide, vGPU 17, "vGPU placements" and Appendix B).
//!
//! A GPU's frame buffer is a region of 1-GiB slots (L40S 48, L4 and A10 24, H100 80GB 80). A
//! vGPU of a type whose frame buffer is `size` GiB occupies slots `[id, id + size)` and may
//! start only at one of its type's supported placement ids. In mixed mode they are the
//! guide's Appendix B tables, written below as data: the simulator derives nothing, so that
//! a rule elsewhere (the planner's) is checked against the tables themselves. In equal mode
//! (the default) the `k`-th vGPU of a type takes `k * size`, for `k` below the type's
//! maximum instance count: the simulator's choice, as NVML reports an id there too.
//!
//! Which GPUs support the mode is decided by the GPU's type catalog (its identity in the
//! profile): `l40s`, `l4`, `a10`, `h100-80gb`; no other.

use super::{Dev, KResult, Kernel};
use crate::profile::overlaps;
use crate::profile::{PciAddr, TypeSpec, VgpuMode};

/// The most vGPUs one GPU holds in mixed mode (vGPU user guide).
pub(crate) const MIXED_MAX_VGPUS: u32 = 32;

/// Supported placement ids in mixed mode, by type size in GiB: one row of Appendix B.
type Table = &'static [(u32, &'static [u32])];

/// NVIDIA L40S (48 slots).
const L40S: Table = &[
    (48, &[0]),
    (24, &[0, 24]),
    (16, &[0, 32]),
    (12, &[0, 12, 24, 36]),
    (8, &[0, 16, 24, 40]),
    (6, &[0, 6, 12, 18, 24, 30, 36, 42]),
    (4, &[0, 8, 12, 20, 24, 32, 36, 44]),
    (
        3,
        &[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45],
    ),
    (
        2,
        &[0, 4, 6, 10, 12, 16, 18, 22, 24, 28, 30, 34, 36, 40, 42, 46],
    ),
    (
        1,
        &[0, 5, 6, 11, 12, 17, 18, 23, 24, 29, 30, 35, 36, 41, 42, 47],
    ),
];

/// 24-GB GPUs: NVIDIA L4 and A10 (24 slots).
const GB24: Table = &[
    (24, &[0]),
    (12, &[0, 12]),
    (8, &[0, 16]),
    (6, &[0, 6, 12, 18]),
    (4, &[0, 8, 12, 20]),
    (3, &[0, 3, 6, 9, 12, 15, 18, 21]),
    (2, &[0, 4, 6, 10, 12, 16, 18, 22]),
    (
        1,
        &[0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23],
    ),
];

/// NVIDIA H100 80GB (80 slots).
const H100_80GB: Table = &[
    (80, &[0]),
    (40, &[0, 40]),
    (20, &[0, 20, 40, 60]),
    (16, &[0, 24, 40, 64]),
    (10, &[0, 10, 20, 30, 40, 50, 60, 70]),
    (8, &[0, 12, 20, 32, 40, 52, 60, 72]),
    (
        5,
        &[0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75],
    ),
    (
        4,
        &[0, 6, 10, 16, 20, 26, 30, 36, 40, 46, 50, 56, 60, 66, 70, 76],
    ),
];

/// The mixed-size region (slots) and table of a GPU with type catalog `catalog`.
fn table_of(catalog: &str) -> Option<(u32, Table)> {
    match catalog {
        "l40s" => Some((48, L40S)),
        "l4" | "a10" => Some((24, GB24)),
        "h100-80gb" => Some((80, H100_80GB)),
        _ => None,
    }
}

/// A type's placement size: its frame buffer in whole GiB, rounded up.
pub(crate) fn placement_size(t: &TypeSpec) -> u32 {
    u32::try_from(t.framebuffer_mib.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// The supported placement ids of a time-sliced type `t` on a GPU with catalog `catalog`, in
/// mixed mode (`mixed`) or in equal mode; `None` when the GPU has no mixed-size mode, or the
/// type none in that mode (a MIG-backed type, a size without a row).
pub(crate) fn supported_ids(catalog: &str, t: &TypeSpec, mixed: bool) -> Option<Vec<u32>> {
    let (region, table) = table_of(catalog)?;
    if t.gpu_instance_profile.is_some() {
        return None;
    }
    let size = placement_size(t);
    if mixed {
        let (_, ids) = table.iter().find(|(s, _)| *s == size)?;
        return Some(ids.to_vec());
    }
    Some(
        (0..t.max_instances)
            .map_while(|k| k.checked_mul(size))
            .filter(|id| id.saturating_add(size) <= region)
            .collect(),
    )
}

/// The slot region of a GPU with catalog `catalog`, when it has the mode.
pub(crate) fn region(catalog: &str) -> Option<u32> {
    table_of(catalog).map(|(r, _)| r)
}

/// The value of `vgpu-placement-id` in a `vgpu_params` write: `Ok(None)` when the text
/// does not name one. The text is `key=value` pairs separated by commas, spaces or newlines
/// (NVIDIA's driver takes other keys, such as `frame_rate_limiter=0`, which the simulator
/// keeps but does not act on); anything else, or a placement id that is not a decimal number,
/// is `EINVAL`. The last `vgpu-placement-id` wins.
pub(crate) fn parse_params(text: &str) -> KResult<Option<u32>> {
    let mut id = None;
    for pair in text
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').ok_or(libc::EINVAL)?;
        let key_ok = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !key_ok || value.is_empty() {
            return Err(libc::EINVAL);
        }
        if key == "vgpu-placement-id" {
            if !value.chars().all(|c| c.is_ascii_digit()) {
                return Err(libc::EINVAL);
            }
            id = Some(value.parse::<u32>().map_err(|_| libc::EINVAL)?);
        }
    }
    Ok(id)
}

/// What holds slots on a GPU: a VF's vGPU or an mdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    Vf(PciAddr),
    Mdev(uuid::Uuid),
}

impl Kernel {
    /// Whether physical GPU `gpu` is in mixed-size mode.
    pub(crate) fn mixed_on(&self, gpu: PciAddr) -> bool {
        self.size_mode.get(&gpu).copied().unwrap_or(false)
    }

    /// The catalog of physical GPU `gpu`, when it has the mixed-size mode.
    fn mixed_catalog(&self, gpu: PciAddr) -> Option<String> {
        let c = self.devs.get(&gpu)?.catalog.clone()?;
        region(&c).map(|_| c)
    }

    /// The supported placement ids of `t` on `gpu` in its mode now.
    pub(crate) fn placements_now(&self, gpu: PciAddr, t: &TypeSpec) -> Option<Vec<u32>> {
        let catalog = self.mixed_catalog(gpu)?;
        supported_ids(&catalog, t, self.mixed_on(gpu))
    }

    /// The vGPUs of `gpu` with a placement: who, its type id, its placement id and size.
    pub(crate) fn placed(&self, gpu: PciAddr) -> Vec<(Holder, String, u32, u32)> {
        let mut out = Vec::new();
        for d in self
            .devs
            .values()
            .filter(|d| d.gpu == gpu && d.nv.current != 0)
        {
            let key = d.nv.current.to_string();
            if let (Some(id), Some(t)) = (d.nv.placed, self.type_of(d, &key)) {
                out.push((Holder::Vf(d.addr), key, id, placement_size(t)));
            }
        }
        for (u, m) in &self.mdevs {
            let Some(p) = self.devs.get(&m.parent).filter(|p| p.gpu == gpu) else {
                continue;
            };
            if let (Some(id), Some(t)) = (m.placement, self.type_of(p, &m.type_id)) {
                out.push((Holder::Mdev(*u), m.type_id.clone(), id, placement_size(t)));
            }
        }
        out
    }

    /// Whether slots `[id, id + size)` of `gpu` are free, not counting `except`'s.
    fn slots_free(&self, gpu: PciAddr, id: u32, size: u32, except: Option<Holder>) -> bool {
        self.placed(gpu)
            .iter()
            .filter(|(h, ..)| Some(*h) != except)
            .all(|(_, _, start, n)| !overlaps((*start, *n), (id, size)))
    }

    /// The supported ids of `t` on `gpu` whose slots are free now, lowest first.
    pub(crate) fn creatable_placements(&self, gpu: PciAddr, t: &TypeSpec) -> Vec<u32> {
        let size = placement_size(t);
        self.placements_now(gpu, t)
            .unwrap_or_default()
            .into_iter()
            .filter(|id| self.slots_free(gpu, *id, size, None))
            .collect()
    }

    /// Whether one more vGPU of `t` fits on `gpu` in mixed mode: below 32 vGPUs and the
    /// GPU's VFs, and one of its supported ids free.
    pub(crate) fn mixed_room(&self, gpu: PciAddr, t: &TypeSpec) -> bool {
        let count: u32 = self.usage(gpu).values().sum();
        let vfs = self
            .devs
            .get(&gpu)
            .and_then(|g| g.sriov.as_ref())
            .map_or(0, |(_, n)| u32::from(*n));
        count < MIXED_MAX_VGPUS.min(vfs) && !self.creatable_placements(gpu, t).is_empty()
    }

    /// The placement a new vGPU of `t` on `gpu` takes (`None` on a GPU without the mode):
    /// `pending` when given, `EINVAL` unless it is a supported id of the type in the GPU's
    /// mode now, `ENOSPC` when its slots overlap another vGPU's (`except`'s own not
    /// counted); without one the lowest free supported id (`ENOSPC` when none is free).
    pub(crate) fn choose_placement(
        &self,
        gpu: PciAddr,
        t: &TypeSpec,
        pending: Option<u32>,
        except: Option<Holder>,
    ) -> KResult<Option<u32>> {
        if self.mixed_catalog(gpu).is_none() {
            return Ok(None);
        }
        let ids = self.placements_now(gpu, t).ok_or(libc::EINVAL)?;
        let size = placement_size(t);
        match pending {
            Some(id) => {
                if !ids.contains(&id) {
                    return Err(libc::EINVAL);
                }
                if !self.slots_free(gpu, id, size, except) {
                    return Err(libc::ENOSPC);
                }
                Ok(Some(id))
            }
            None => ids
                .into_iter()
                .find(|id| self.slots_free(gpu, *id, size, except))
                .map(Some)
                .ok_or(libc::ENOSPC),
        }
    }

    /// Sets the mixed-size mode of `gpu` (`mixed`) or equal mode: `ENODEV` for a device that
    /// is not an NVIDIA GPU with the mode (an unknown address, a VF, another GPU), `EBUSY`
    /// while the GPU holds a vGPU (on its VFs or mdevs). Asking for the mode it has changes
    /// nothing.
    pub(crate) fn set_size_mode(&mut self, gpu: PciAddr, mixed: bool) -> KResult<()> {
        let d = self.devs.get(&gpu).ok_or(libc::ENODEV)?;
        if d.physfn.is_some() || self.mixed_catalog(gpu).is_none() {
            return Err(libc::ENODEV);
        }
        if self.mixed_on(gpu) == mixed {
            return Ok(());
        }
        if self.gpu_busy(gpu) {
            return Err(libc::EBUSY);
        }
        self.size_mode.insert(gpu, mixed);
        Ok(())
    }

    /// `vgpu_params` of an mdev: the mdev's placement moves to the `vgpu-placement-id` it
    /// names at once (the simulator has no mdev start: see `Kernel::set_mdev_params`).
    fn place_mdev(&mut self, uuid: uuid::Uuid, id: u32) -> KResult<()> {
        let m = self.mdevs.get(&uuid).ok_or(libc::ENODEV)?;
        let p = self.devs.get(&m.parent).ok_or(libc::ENODEV)?;
        let t = self.type_of(p, &m.type_id).ok_or(libc::ENODEV)?;
        let placed = self.choose_placement(p.gpu, t, Some(id), Some(Holder::Mdev(uuid)))?;
        if let Some(m) = self.mdevs.get_mut(&uuid) {
            m.placement = placed;
        }
        Ok(())
    }

    /// `vgpu_params` store of an mdev: `EBUSY` while a simulated process holds its VFIO
    /// device (a VM runs it); `EINVAL` for text that is not `key=value` pairs; a
    /// `vgpu-placement-id` moves the mdev there now (`EINVAL` for an id its type does not
    /// support in the GPU's mode, `ENOSPC` when the slots are another vGPU's), as the
    /// simulator has no other point between creation and start.
    pub(crate) fn set_mdev_params(&mut self, uuid: uuid::Uuid, data: &[u8]) -> KResult<()> {
        let text = super::sysfs_str(data)?.to_owned();
        if !self.mdevs.contains_key(&uuid) {
            return Err(libc::ENODEV);
        }
        if self.mdev_open(uuid) {
            return Err(libc::EBUSY);
        }
        if let Some(id) = parse_params(&text)? {
            self.place_mdev(uuid, id)?;
        }
        if let Some(m) = self.mdevs.get_mut(&uuid) {
            m.params = text;
        }
        Ok(())
    }

    /// Whether an mdev is an NVIDIA vGPU with `nvidia/vgpu_params`.
    pub(crate) fn mdev_has_params(&self, parent: &Dev) -> bool {
        matches!(parent.vgpu, Some(VgpuMode::Mdev | VgpuMode::MdevOnVf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_params_placement_id_parses() {
        assert_eq!(parse_params("vgpu-placement-id=16"), Ok(Some(16)));
    }

    #[test]
    fn parse_params_other_keys_name_none() {
        assert_eq!(
            parse_params("frame_rate_limiter=0, disable_vnc=1"),
            Ok(None)
        );
    }

    #[test]
    fn parse_params_empty_names_none() {
        assert_eq!(parse_params(""), Ok(None));
    }

    #[test]
    fn parse_params_word_without_value_is_einval() {
        assert_eq!(parse_params("vgpu-placement-id"), Err(libc::EINVAL));
    }

    #[test]
    fn parse_params_negative_id_is_einval() {
        assert_eq!(parse_params("vgpu-placement-id=-1"), Err(libc::EINVAL));
    }

    #[test]
    fn parse_params_id_above_u32_is_einval() {
        assert_eq!(
            parse_params("vgpu-placement-id=4294967296"),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn table_rows_fit_their_region() {
        for (region, table) in [(48, L40S), (24, GB24), (80, H100_80GB)] {
            for (size, ids) in table {
                assert!(ids.iter().all(|id| id + size <= region), "{region} {size}");
            }
        }
    }
}
