//! MIG in host profiles and the catalog: MIG mode and GPU instances at boot, the GPU-instance
//! profiles of a GPU, and where an instance of a profile may go.
//!
//! The placement rules follow NVIDIA's driver ("GPU Instance Placements" of the MIG user
//! guide, `nvidia-smi mig -lgipp`). A GPU instance takes memory slices `start .. start +
//! size` at one of its profile's placements. It may not overlap another instance. A profile
//! has at most `instance_count` instances. Compute slices are not counted.

use std::fmt;

use serde::Deserialize;

/// MIG mode of a GPU and its GPU instances at boot.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    /// Whether MIG mode is on. Off, MIG-backed types are not creatable and no GPU instance
    /// exists.
    pub enabled: bool,
    /// The GPU instances that exist.
    #[serde(default)]
    pub gpu_instances: Vec<GpuInstanceSpec>,
}

/// One GPU instance at boot.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInstanceSpec {
    /// Its id (`nvidia-smi mig -lgi`), what a VF's `nvidia/gpu_instance_id` takes.
    pub id: u32,
    /// Its profile, e.g. `1g.18gb`.
    pub profile: String,
    /// The first memory slice of its placement. Absent in the file, the lowest free
    /// placement of its profile; every instance has one once the profile is loaded.
    #[serde(default)]
    pub start: Option<u32>,
}

/// A GPU-instance profile of a catalog, as `nvidia-smi mig -lgip` and `-lgipp` list it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInstanceProfileSpec {
    /// The catalog of the GPUs that have it.
    pub catalog: String,
    /// Its name without `MIG `: `1g.18gb`.
    pub name: String,
    /// NVML's profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// NVML's profile id (the `ID` column of `nvidia-smi mig -lgip`).
    pub id: u32,
    /// Compute slices.
    pub slices: u32,
    /// The most instances of it a GPU holds.
    pub instance_count: u32,
    /// Its memory in MiB.
    pub memory_mib: u64,
    /// Memory slices one instance spans.
    pub placement_size: u32,
    /// The memory slices an instance may start at.
    pub placement_starts: Vec<u32>,
}

impl super::Profile {
    /// The GPU-instance profiles of catalog `catalog`.
    fn gi_profiles_of<'a>(
        &'a self,
        catalog: &'a str,
    ) -> impl Iterator<Item = &'a GpuInstanceProfileSpec> + 'a {
        self.gpu_instance_profiles
            .iter()
            .filter(move |p| p.catalog == catalog)
    }

    /// Gives every boot-time GPU instance its placement: those with a `start` first, each
    /// checked, then the others at the lowest free placement of their profile, in order.
    pub(super) fn place_gpu_instances(&mut self) -> Result<(), String> {
        let mut placed_all = Vec::new();
        for dev in &self.devices {
            let Some(mig) = &dev.mig else {
                continue;
            };
            let catalog = dev.catalog.as_deref().unwrap_or_default();
            let profiles: Vec<&GpuInstanceProfileSpec> = self.gi_profiles_of(catalog).collect();
            let mut placed: Vec<PlacedInstance> = Vec::new();
            let explicit = mig.gpu_instances.iter().filter(|gi| gi.start.is_some());
            let implicit = mig.gpu_instances.iter().filter(|gi| gi.start.is_none());
            for gi in explicit.chain(implicit) {
                let p = place(&profiles, &placed, &gi.profile, gi.start)
                    .map_err(|e| format!("device {}: GPU instance {}: {e}", dev.addr, gi.id))?;
                placed.push(PlacedInstance { id: gi.id, ..p });
            }
            placed_all.push((dev.addr, placed));
        }
        for (addr, placed) in placed_all {
            let Some(mig) = self
                .devices
                .iter_mut()
                .find(|d| d.addr == addr)
                .and_then(|d| d.mig.as_mut())
            else {
                continue;
            };
            for gi in &mut mig.gpu_instances {
                gi.start = placed.iter().find(|p| p.id == gi.id).map(|p| p.start);
            }
        }
        Ok(())
    }
}

/// A GPU instance with its placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlacedInstance {
    /// Its id.
    pub(crate) id: u32,
    /// Its profile's name.
    pub(crate) profile: String,
    /// Its first memory slice.
    pub(crate) start: u32,
    /// The memory slices it spans.
    pub(crate) size: u32,
}

/// Why a GPU instance cannot be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PlaceError {
    /// The GPU has no such profile.
    UnknownProfile(String),
    /// The start is not one of the profile's placements.
    NotAPlacement(u32),
    /// The profile has `instance_count` instances already.
    CountReached(u32),
    /// The placement overlaps instance `id`.
    Overlaps(u32),
    /// No placement of the profile is free.
    NoFreePlacement,
}

impl PlaceError {
    /// The errno the simulated driver answers: `EINVAL` for a profile or placement that
    /// does not exist, `ENOSPC` for one that does not fit now (NVML's
    /// `NVML_ERROR_INSUFFICIENT_RESOURCES`).
    pub(crate) fn errno(&self) -> i32 {
        match self {
            PlaceError::UnknownProfile(_) | PlaceError::NotAPlacement(_) => libc::EINVAL,
            PlaceError::CountReached(_) | PlaceError::Overlaps(_) | PlaceError::NoFreePlacement => {
                libc::ENOSPC
            }
        }
    }
}

impl fmt::Display for PlaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaceError::UnknownProfile(name) => write!(f, "no GPU-instance profile {name:?}"),
            PlaceError::NotAPlacement(start) => {
                write!(f, "start {start} is not a placement of the profile")
            }
            PlaceError::CountReached(n) => write!(f, "the profile has its {n} instances"),
            PlaceError::Overlaps(id) => write!(f, "the placement overlaps GPU instance {id}"),
            PlaceError::NoFreePlacement => f.write_str("no placement of the profile is free"),
        }
    }
}

/// Whether memory slices `a` and `b` (`(start, size)`) share one.
pub(crate) fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Where a new instance of profile `name` goes beside `placed`: at `start` when given, else
/// at the lowest free placement. Its id is left 0 for the caller.
///
/// # Errors
/// [`PlaceError`], in this order: the profile, the start, the count, the overlap.
pub(crate) fn place(
    profiles: &[&GpuInstanceProfileSpec],
    placed: &[PlacedInstance],
    name: &str,
    start: Option<u32>,
) -> Result<PlacedInstance, PlaceError> {
    let p = profiles
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| PlaceError::UnknownProfile(name.to_owned()))?;
    if let Some(s) = start {
        if !p.placement_starts.contains(&s) {
            return Err(PlaceError::NotAPlacement(s));
        }
    }
    let existing = placed.iter().filter(|gi| gi.profile == p.name).count();
    if existing >= usize::try_from(p.instance_count).unwrap_or(usize::MAX) {
        return Err(PlaceError::CountReached(p.instance_count));
    }
    let blocker = |s: u32| {
        placed
            .iter()
            .find(|gi| overlaps((gi.start, gi.size), (s, p.placement_size)))
            .map(|gi| gi.id)
    };
    let chosen = match start {
        Some(s) => match blocker(s) {
            Some(id) => return Err(PlaceError::Overlaps(id)),
            None => s,
        },
        None => {
            let mut starts = p.placement_starts.clone();
            starts.sort_unstable();
            starts
                .into_iter()
                .find(|s| blocker(*s).is_none())
                .ok_or(PlaceError::NoFreePlacement)?
        }
    };
    Ok(PlacedInstance {
        id: 0,
        profile: p.name.clone(),
        start: chosen,
        size: p.placement_size,
    })
}

/// How many more instances of profile `p` fit beside `placed`: its free placements taken
/// from the lowest start up, each beside the last (all have one size, so this is the most
/// that fit), at most what its instance count leaves. NVML's
/// `nvmlDeviceGetGpuInstanceRemainingCapacity`.
pub(crate) fn remaining(p: &GpuInstanceProfileSpec, placed: &[PlacedInstance]) -> u32 {
    let mut starts = p.placement_starts.clone();
    starts.sort_unstable();
    let mut chosen: Vec<(u32, u32)> = Vec::new();
    for start in starts {
        let slices = (start, p.placement_size);
        let free = !placed
            .iter()
            .any(|gi| overlaps((gi.start, gi.size), slices))
            && !chosen.iter().any(|c| overlaps(*c, slices));
        if free {
            chosen.push(slices);
        }
    }
    let existing = placed.iter().filter(|gi| gi.profile == p.name).count();
    let by_count = p
        .instance_count
        .saturating_sub(u32::try_from(existing).unwrap_or(u32::MAX));
    u32::try_from(chosen.len())
        .unwrap_or(u32::MAX)
        .min(by_count)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::SimError;
    use crate::profile::Profile;

    fn h200_with_mig(mig: &str) -> Result<Profile, SimError> {
        let text = format!(
            "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=0x10de\n\
             device=2\nclass=0x030200\nvgpu='vendor-vfio'\ncatalog='h200x'\nmig={mig}\n"
        );
        Profile::from_toml(&text, Path::new("x.toml"))
    }

    #[test]
    fn profile_from_toml_gpu_instance_without_start_takes_lowest_free_placement() {
        let p = h200_with_mig(
            "{enabled=true,gpu_instances=[{id=3,profile='2g.35gb'},\
             {id=9,profile='1g.18gb',start=0}]}",
        )
        .expect("valid");
        let starts: Vec<(u32, Option<u32>)> = p.devices[0]
            .mig
            .iter()
            .flat_map(|m| m.gpu_instances.iter().map(|gi| (gi.id, gi.start)))
            .collect();
        assert_eq!(starts, vec![(3, Some(2)), (9, Some(0))]);
    }

    #[test]
    fn profile_from_toml_overlapping_gpu_instances_fail() {
        assert!(matches!(
            h200_with_mig(
                "{enabled=true,gpu_instances=[{id=1,profile='2g.35gb',start=0},\
                 {id=2,profile='1g.18gb',start=1}]}"
            ),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("overlaps")
        ));
    }

    #[test]
    fn profile_from_toml_gpu_instances_with_mig_off_fail() {
        assert!(matches!(
            h200_with_mig("{enabled=false,gpu_instances=[{id=1,profile='1g.18gb'}]}"),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("MIG mode on")
        ));
    }

    fn profile(name: &str, count: u32, size: u32, starts: &[u32]) -> GpuInstanceProfileSpec {
        GpuInstanceProfileSpec {
            catalog: "h200x".to_owned(),
            name: name.to_owned(),
            index: 0,
            id: 0,
            slices: 1,
            instance_count: count,
            memory_mib: 0,
            placement_size: size,
            placement_starts: starts.to_vec(),
        }
    }

    fn at(id: u32, name: &str, start: u32, size: u32) -> PlacedInstance {
        PlacedInstance {
            id,
            profile: name.to_owned(),
            start,
            size,
        }
    }

    #[test]
    fn remaining_1g_beside_two_1g_and_a_2g_is_the_three_free_slices() {
        let one_g = profile("1g.18gb", 7, 1, &[0, 1, 2, 3, 4, 5, 6]);
        let placed = [
            at(3, "2g.35gb", 0, 2),
            at(9, "1g.18gb", 4, 1),
            at(10, "1g.18gb", 5, 1),
        ];
        assert_eq!(remaining(&one_g, &placed), 3);
    }

    #[test]
    fn remaining_is_capped_by_instance_count() {
        let me = profile("1g.18gb+me", 1, 1, &[0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(remaining(&me, &[]), 1);
    }

    #[test]
    fn overlaps_adjacent_slices_is_false() {
        assert!(!overlaps((0, 2), (2, 2)));
    }

    #[test]
    fn overlaps_inside_is_true() {
        assert!(overlaps((0, 8), (4, 1)));
    }

    #[test]
    fn place_without_start_takes_lowest_free_placement() {
        let two_g = profile("2g.35gb", 3, 2, &[4, 0, 2]);
        assert_eq!(
            place(&[&two_g], &[at(3, "1g.18gb", 0, 1)], "2g.35gb", None),
            Ok(at(0, "2g.35gb", 2, 2))
        );
    }

    #[test]
    fn place_overlapping_start_is_overlaps() {
        let two_g = profile("2g.35gb", 3, 2, &[0, 2, 4]);
        assert_eq!(
            place(&[&two_g], &[at(9, "1g.18gb", 5, 1)], "2g.35gb", Some(4)),
            Err(PlaceError::Overlaps(9))
        );
    }

    #[test]
    fn place_start_outside_placements_is_not_a_placement() {
        let two_g = profile("2g.35gb", 3, 2, &[0, 2, 4]);
        assert_eq!(
            place(&[&two_g], &[], "2g.35gb", Some(1)),
            Err(PlaceError::NotAPlacement(1))
        );
    }

    #[test]
    fn place_beyond_instance_count_is_count_reached() {
        let me = profile("1g.18gb+me", 1, 1, &[0, 1, 2]);
        assert_eq!(
            place(&[&me], &[at(1, "1g.18gb+me", 0, 1)], "1g.18gb+me", Some(2)),
            Err(PlaceError::CountReached(1))
        );
    }

    #[test]
    fn place_unknown_profile_is_einval() {
        assert_eq!(
            place(&[], &[], "2g.20gb", None).map_err(|e| e.errno()),
            Err(libc::EINVAL)
        );
    }
}
