//! Where new GPU instances go on a MIG GPU: a pure search over the placements NVML reports.
//!
//! A GPU instance occupies a run of memory slices. NVML lists, per GPU-instance profile, the
//! runs it may take (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`: a start slice and a
//! size each; NVIDIA Multi-Instance GPU User Guide, "Placements"). Two instances never share a
//! slice. Whether a geometry fits depends on where each instance goes: on Hopper, a `3g` at
//! slice 0 leaves room for one `2g`, at slice 4 for two.
//!
//! [`fit_gpu_instances`] places the new instances beside those kept. It searches every
//! assignment, backtracking, so it finds a fit whenever one exists. It tries the largest
//! profiles first and each profile's lowest start first, so the answer is deterministic: the
//! first fit in that order.

use std::collections::{BTreeMap, HashSet};

use crate::model::nvml::GpuInstancePlacement;

/// A GPU instance of a profile at a placement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacedGpuInstance {
    /// The GPU-instance profile, as `nvidia-smi mig -lgip` names it without `MIG ` (`1g.18gb`).
    pub profile: String,
    /// Where it is.
    pub placement: GpuInstancePlacement,
}

/// Why [`fit_gpu_instances`] found no place for the instances.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigFitError {
    /// The GPU lists no placement for a profile asked for: it does not have the profile.
    #[error("the GPU has no GPU-instance profile {profile}")]
    UnknownProfile {
        /// The profile.
        profile: String,
    },
    /// A placement that is no run of slices: size 0, or past slice 63.
    #[error("GPU-instance profile {profile} lists a placement of {size} slice(s) at {start}")]
    BadPlacement {
        /// The profile.
        profile: String,
        /// Its first slice.
        start: u32,
        /// Its size.
        size: u32,
    },
    /// No assignment of placements holds them all beside the kept instances.
    #[error("the GPU instances do not fit together on the GPU")]
    DoesNotFit,
}

/// Chooses a placement for each new GPU instance so that they and the kept ones fit together.
///
/// - `placements`: per profile, the placements NVML reports for it on this GPU;
/// - `kept`: the instances that stay where they are (their slices are taken);
/// - `wanted`: how many new instances of each profile to place (the kept ones not counted).
///
/// Returns the new instances, largest profiles first (by placement size, then by name), each
/// profile's in order of start. Among all fits it gives the first in that order with the lowest
/// starts. Fails when a wanted profile has no placements, a placement is malformed, or no
/// assignment fits.
pub fn fit_gpu_instances(
    placements: &BTreeMap<String, Vec<GpuInstancePlacement>>,
    kept: &[PlacedGpuInstance],
    wanted: &BTreeMap<String, u32>,
) -> Result<Vec<PlacedGpuInstance>, MigFitError> {
    let mut profiles = Vec::new();
    for (profile, count) in wanted.iter().filter(|(_, count)| **count > 0) {
        let listed = placements
            .get(profile)
            .filter(|list| !list.is_empty())
            .ok_or_else(|| MigFitError::UnknownProfile {
                profile: profile.clone(),
            })?;
        let mut runs = Vec::new();
        for placement in listed {
            runs.push((*placement, mask(profile, *placement)?));
        }
        runs.sort_unstable_by_key(|(placement, _)| *placement);
        runs.dedup();
        let size = runs.iter().map(|(p, _)| p.size).max().unwrap_or(0);
        // Two instances of one profile never share a placement: more than it has never fit.
        let count = match usize::try_from(*count) {
            Ok(count) if count <= runs.len() => count,
            _ => return Err(MigFitError::DoesNotFit),
        };
        profiles.push(Profile {
            name: profile,
            size,
            runs,
            count,
        });
    }
    profiles.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.name.cmp(b.name)));
    let mut taken = 0u64;
    for instance in kept {
        taken |= mask(&instance.profile, instance.placement)?;
    }
    // More slices than the free ones these profiles can reach never fit: said without a search.
    let reachable = profiles
        .iter()
        .flat_map(|p| &p.runs)
        .fold(0u64, |all, (_, run)| all | run);
    let needed: usize = profiles
        .iter()
        .map(|p| {
            let least = p.runs.iter().map(|(r, _)| r.size).min().unwrap_or(0);
            least as usize * p.count
        })
        .sum();
    if needed > (reachable & !taken).count_ones() as usize {
        return Err(MigFitError::DoesNotFit);
    }
    let mut chosen: Vec<Vec<usize>> = profiles.iter().map(|_| Vec::new()).collect();
    if !search(&profiles, 0, taken, &mut chosen, &mut HashSet::new()) {
        return Err(MigFitError::DoesNotFit);
    }
    Ok(profiles
        .iter()
        .zip(&chosen)
        .flat_map(|(profile, runs)| {
            runs.iter().map(|run| PlacedGpuInstance {
                profile: profile.name.clone(),
                placement: profile.runs[*run].0,
            })
        })
        .collect())
}

/// One wanted profile: its placements in order of start, with their slice masks.
struct Profile<'a> {
    name: &'a String,
    size: u32,
    runs: Vec<(GpuInstancePlacement, u64)>,
    count: usize,
}

/// The slices `placement` occupies, as bits.
fn mask(profile: &str, placement: GpuInstancePlacement) -> Result<u64, MigFitError> {
    let bad = || MigFitError::BadPlacement {
        profile: profile.to_owned(),
        start: placement.start,
        size: placement.size,
    };
    let end = placement
        .start
        .checked_add(placement.size)
        .ok_or_else(bad)?;
    if placement.size == 0 || end > 64 {
        return Err(bad());
    }
    let run = u64::MAX >> (64 - placement.size);
    Ok(run << placement.start)
}

/// Where a search stands: the profile, how many of it are placed, the first placement index
/// left to it, and the slices taken.
type State = (usize, usize, usize, u64);

/// Places the remaining instances of `profiles[at..]` (and of `profiles[at]`, those not yet in
/// `chosen[at]`) on slices not `taken`; true when all fit, `chosen` then holding each one's
/// placement index. Instances of one profile take placements in increasing index, so each set
/// of placements is tried once; a state that failed (`failed`) is not searched again.
fn search(
    profiles: &[Profile<'_>],
    at: usize,
    taken: u64,
    chosen: &mut [Vec<usize>],
    failed: &mut HashSet<State>,
) -> bool {
    let Some(profile) = profiles.get(at) else {
        return true;
    };
    if chosen[at].len() == profile.count {
        return search(profiles, at + 1, taken, chosen, failed);
    }
    let first = chosen[at].last().map_or(0, |last| last + 1);
    let state = (at, chosen[at].len(), first, taken);
    // Fewer free placements than instances left never fit; nor does a state that failed.
    let free = profile.runs[first..]
        .iter()
        .filter(|(_, run)| taken & run == 0)
        .count();
    if free < profile.count - chosen[at].len() || failed.contains(&state) {
        return false;
    }
    for (index, (_, run)) in profile.runs.iter().enumerate().skip(first) {
        if taken & run != 0 {
            continue;
        }
        chosen[at].push(index);
        if search(profiles, at, taken | run, chosen, failed) {
            return true;
        }
        chosen[at].pop();
    }
    failed.insert(state);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: u32, size: u32) -> GpuInstancePlacement {
        GpuInstancePlacement { start, size }
    }

    fn placed(profile: &str, start: u32, size: u32) -> PlacedGpuInstance {
        PlacedGpuInstance {
            profile: profile.to_owned(),
            placement: at(start, size),
        }
    }

    /// NVML's possible placements on an H200 (the same on every Hopper GPU): 8 memory slices.
    fn hopper() -> BTreeMap<String, Vec<GpuInstancePlacement>> {
        BTreeMap::from([
            ("1g.18gb".to_owned(), (0..=6).map(|s| at(s, 1)).collect()),
            ("2g.35gb".to_owned(), vec![at(0, 2), at(2, 2), at(4, 2)]),
            ("3g.71gb".to_owned(), vec![at(0, 4), at(4, 4)]),
            ("4g.71gb".to_owned(), vec![at(0, 4)]),
            ("7g.141gb".to_owned(), vec![at(0, 8)]),
        ])
    }

    fn want(counts: &[(&str, u32)]) -> BTreeMap<String, u32> {
        counts.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect()
    }

    #[test]
    fn fit_3g_and_two_2g_puts_the_3g_at_slice_4() {
        // At slice 0, tried first, the 3g leaves one 2g placement (4): the search moves it on.
        let wanted = want(&[("3g.71gb", 1), ("2g.35gb", 2)]);

        let fit = fit_gpu_instances(&hopper(), &[], &wanted);

        assert_eq!(
            fit,
            Ok(vec![
                placed("3g.71gb", 4, 4),
                placed("2g.35gb", 0, 2),
                placed("2g.35gb", 2, 2),
            ])
        );
    }

    #[test]
    fn fit_seven_1g_takes_slices_0_to_6() {
        let fit = fit_gpu_instances(&hopper(), &[], &want(&[("1g.18gb", 7)]));

        assert_eq!(fit, Ok((0..=6).map(|s| placed("1g.18gb", s, 1)).collect()));
    }

    #[test]
    fn fit_eight_1g_does_not_fit() {
        let fit = fit_gpu_instances(&hopper(), &[], &want(&[("1g.18gb", 8)]));

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }

    #[test]
    fn fit_4g_and_3g_puts_the_3g_at_slice_4() {
        let wanted = want(&[("4g.71gb", 1), ("3g.71gb", 1)]);

        let fit = fit_gpu_instances(&hopper(), &[], &wanted);

        assert_eq!(
            fit,
            Ok(vec![placed("3g.71gb", 4, 4), placed("4g.71gb", 0, 4)])
        );
    }

    #[test]
    fn fit_two_3g_and_a_1g_does_not_fit_two_3g_take_all_8_slices() {
        let wanted = want(&[("3g.71gb", 2), ("1g.18gb", 1)]);

        let fit = fit_gpu_instances(&hopper(), &[], &wanted);

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }

    #[test]
    fn fit_4g_and_three_1g_fits_where_smallest_first_would_block_slice_0() {
        // Smallest first, the 1g instances would take slices 0-2 and leave the 4g no place.
        let wanted = want(&[("1g.18gb", 3), ("4g.71gb", 1)]);

        let fit = fit_gpu_instances(&hopper(), &[], &wanted);

        assert_eq!(
            fit,
            Ok(vec![
                placed("4g.71gb", 0, 4),
                placed("1g.18gb", 4, 1),
                placed("1g.18gb", 5, 1),
                placed("1g.18gb", 6, 1),
            ])
        );
    }

    #[test]
    fn fit_7g_and_a_1g_does_not_fit() {
        let wanted = want(&[("7g.141gb", 1), ("1g.18gb", 1)]);

        let fit = fit_gpu_instances(&hopper(), &[], &wanted);

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }

    #[test]
    fn fit_kept_1g_at_slice_0_moves_the_new_ones_past_it() {
        let kept = [placed("1g.18gb", 0, 1)];
        let wanted = want(&[("3g.71gb", 1), ("2g.35gb", 1)]);

        let fit = fit_gpu_instances(&hopper(), &kept, &wanted);

        assert_eq!(
            fit,
            Ok(vec![placed("3g.71gb", 4, 4), placed("2g.35gb", 2, 2)])
        );
    }

    #[test]
    fn fit_kept_1g_at_slice_0_leaves_no_place_for_a_4g() {
        let kept = [placed("1g.18gb", 0, 1)];

        let fit = fit_gpu_instances(&hopper(), &kept, &want(&[("4g.71gb", 1)]));

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }

    #[test]
    fn fit_nothing_wanted_is_nothing_placed() {
        let kept = [placed("7g.141gb", 0, 8)];

        let fit = fit_gpu_instances(&hopper(), &kept, &want(&[("1g.18gb", 0)]));

        assert_eq!(fit, Ok(Vec::new()));
    }

    #[test]
    fn fit_profile_without_placements_is_unknown_profile() {
        let fit = fit_gpu_instances(&hopper(), &[], &want(&[("1g.10gb", 1)]));

        assert_eq!(
            fit,
            Err(MigFitError::UnknownProfile {
                profile: "1g.10gb".to_owned()
            })
        );
    }

    #[test]
    fn fit_placement_past_slice_63_is_bad_placement() {
        let placements = BTreeMap::from([("1g.18gb".to_owned(), vec![at(63, 2)])]);

        let fit = fit_gpu_instances(&placements, &[], &want(&[("1g.18gb", 1)]));

        assert_eq!(
            fit,
            Err(MigFitError::BadPlacement {
                profile: "1g.18gb".to_owned(),
                start: 63,
                size: 2
            })
        );
    }

    /// 32 two-slice placements and one four-slice placement across slices 1-4, on 64 slices.
    fn wide() -> BTreeMap<String, Vec<GpuInstancePlacement>> {
        BTreeMap::from([
            ("2g".to_owned(), (0..32).map(|i| at(i * 2, 2)).collect()),
            ("4g".to_owned(), vec![at(1, 4)]),
        ])
    }

    #[test]
    fn fit_on_64_slices_places_the_two_slice_ones_past_the_four_slice_one() {
        let fit = fit_gpu_instances(&wide(), &[], &want(&[("2g", 29), ("4g", 1)]));

        assert_eq!(
            fit.map(|f| f[..3].to_vec()),
            Ok(vec![
                placed("4g", 1, 4),
                placed("2g", 6, 2),
                placed("2g", 8, 2)
            ])
        );
    }

    #[test]
    fn fit_on_64_slices_one_too_many_ends_without_trying_every_set() {
        // The slices add up (4 + 30 x 2 = 64), but the 4g blocks three 2g placements: a search
        // over the sets of 30 of the 29 left would not end in time.
        let fit = fit_gpu_instances(&wide(), &[], &want(&[("2g", 30), ("4g", 1)]));

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }

    #[test]
    fn fit_huge_count_does_not_fit_without_searching() {
        let fit = fit_gpu_instances(&hopper(), &[], &want(&[("1g.18gb", u32::MAX)]));

        assert_eq!(fit, Err(MigFitError::DoesNotFit));
    }
}
