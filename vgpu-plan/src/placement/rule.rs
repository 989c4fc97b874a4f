//! The supported placement ids of a type in mixed-size mode.
//!
//! Sources: NVIDIA vGPU 17 user guide, Appendix B (the placement tables of the L40S, the 24-GB
//! GPUs and the H100 80GB); NVIDIA open-gpu-kernel-modules,
//! `src/nvidia/src/kernel/virtualization/kernel_vgpu_mgr.c` (placement ids kept per GPU and
//! type, and updated as vGPUs come and go). The driver gets the ids from tables; this rule
//! reproduces every row of the three tables in the guide (the tests write each row out).
//!
//! The rule, for a region of `R` slots and a size of `s` GiB:
//!
//! 1. The count `n` of ids is the largest power of two with `n * s <= R`, at most 16.
//! 2. With `n = 1` the one id is 0.
//! 3. Otherwise the region splits into `n / 2` equal parts of `L = 2R / n` slots. Each part
//!    has two ids: its first slot, and its last `s` slots (`k * L` and `k * L + L - s`).
//!
//! So the ids follow a halving of the region, and a vGPU sits at either end of its part. Two
//! vGPUs of one size never overlap (`L >= 2s`). Every vGPU holds the first or the last slot
//! of one of 8 equal parts, so at most 16 share a GPU, below the driver's 32. The cap of 16 shows in one row: 1 GiB on an
//! L40S has 16 ids, in parts of 6 slots, not 32. An H100 NVL (94 slots) is covered for sizes
//! from 12 GiB; smaller sizes would need parts of 23.5 slots, and the rule refuses them.

use super::{MAX_REGION_SLOTS, PlacementError, bits};

/// The most supported ids of one size.
const MAX_IDS: u32 = 16;

/// The supported placement ids of a `size` GiB type on a region of `region` slots, as a mask.
pub(super) fn supported_mask(region: u32, size: u32) -> Result<u128, PlacementError> {
    if region == 0 || region > MAX_REGION_SLOTS {
        return Err(PlacementError::Region { region });
    }
    if size == 0 || size > region {
        return Err(PlacementError::Size { region, size });
    }
    let count = (1u32 << (region / size).ilog2()).min(MAX_IDS);
    if count == 1 {
        return Ok(1);
    }
    let parts = count / 2;
    if region % parts != 0 {
        return Err(PlacementError::Uneven {
            region,
            size,
            parts,
        });
    }
    let len = region / parts;
    Ok((0..parts).fold(0u128, |mask, k| {
        mask | 1u128 << (k * len) | 1u128 << (k * len + len - size)
    }))
}

/// The supported placement ids of a `size` GiB type on a region of `region` 1-GiB slots in
/// mixed-size mode, lowest first.
///
/// Fails for a region of 0 or more than 128 slots, a size of 0 or larger than the region, and
/// a region the rule cannot split evenly for the size.
pub fn supported_placements(region: u32, size: u32) -> Result<Vec<u32>, PlacementError> {
    Ok(bits(supported_mask(region, size)?).collect())
}

/// A type's maximum in mixed-size mode: the count of its supported ids.
///
/// Fails as [`supported_placements`] does.
pub fn max_instances(region: u32, size: u32) -> Result<u32, PlacementError> {
    Ok(supported_mask(region, size)?.count_ones())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each size of a table row and its ids, as the guide prints them.
    fn table(region: u32, sizes: &[u32]) -> Vec<(u32, Vec<u32>)> {
        sizes
            .iter()
            .map(|&size| (size, supported_placements(region, size).unwrap_or_default()))
            .collect()
    }

    #[test]
    fn supported_placements_l40s_match_appendix_b() {
        let rows = table(48, &[48, 24, 16, 12, 8, 6, 4, 3, 2, 1]);

        assert_eq!(
            rows,
            vec![
                (48, vec![0]),
                (24, vec![0, 24]),
                (16, vec![0, 32]),
                (12, vec![0, 12, 24, 36]),
                (8, vec![0, 16, 24, 40]),
                (6, vec![0, 6, 12, 18, 24, 30, 36, 42]),
                (4, vec![0, 8, 12, 20, 24, 32, 36, 44]),
                (
                    3,
                    vec![0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45]
                ),
                (
                    2,
                    vec![0, 4, 6, 10, 12, 16, 18, 22, 24, 28, 30, 34, 36, 40, 42, 46]
                ),
                (
                    1,
                    vec![0, 5, 6, 11, 12, 17, 18, 23, 24, 29, 30, 35, 36, 41, 42, 47]
                ),
            ]
        );
    }

    #[test]
    fn supported_placements_24gb_match_appendix_b() {
        let rows = table(24, &[24, 12, 8, 6, 4, 3, 2, 1]);

        assert_eq!(
            rows,
            vec![
                (24, vec![0]),
                (12, vec![0, 12]),
                (8, vec![0, 16]),
                (6, vec![0, 6, 12, 18]),
                (4, vec![0, 8, 12, 20]),
                (3, vec![0, 3, 6, 9, 12, 15, 18, 21]),
                (2, vec![0, 4, 6, 10, 12, 16, 18, 22]),
                (
                    1,
                    vec![0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23]
                ),
            ]
        );
    }

    #[test]
    fn supported_placements_h100_80gb_match_appendix_b() {
        let rows = table(80, &[80, 40, 20, 16, 10, 8, 5, 4]);

        assert_eq!(
            rows,
            vec![
                (80, vec![0]),
                (40, vec![0, 40]),
                (20, vec![0, 20, 40, 60]),
                (16, vec![0, 24, 40, 64]),
                (10, vec![0, 10, 20, 30, 40, 50, 60, 70]),
                (8, vec![0, 12, 20, 32, 40, 52, 60, 72]),
                (
                    5,
                    vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75]
                ),
                (
                    4,
                    vec![0, 6, 10, 16, 20, 26, 30, 36, 40, 46, 50, 56, 60, 66, 70, 76]
                ),
            ]
        );
    }

    #[test]
    fn supported_placements_h100_nvl_23gib_splits_in_halves() {
        let ids = supported_placements(94, 23);

        assert_eq!(ids, Ok(vec![0, 24, 47, 71]));
    }

    #[test]
    fn supported_placements_h100_nvl_11gib_is_uneven() {
        let ids = supported_placements(94, 11);

        assert_eq!(
            ids,
            Err(PlacementError::Uneven {
                region: 94,
                size: 11,
                parts: 4
            })
        );
    }

    #[test]
    fn supported_placements_zero_size_is_refused() {
        let ids = supported_placements(48, 0);

        assert_eq!(
            ids,
            Err(PlacementError::Size {
                region: 48,
                size: 0
            })
        );
    }

    #[test]
    fn supported_placements_size_over_region_is_refused() {
        let ids = supported_placements(24, 25);

        assert_eq!(
            ids,
            Err(PlacementError::Size {
                region: 24,
                size: 25
            })
        );
    }

    #[test]
    fn supported_placements_empty_region_is_refused() {
        let ids = supported_placements(0, 1);

        assert_eq!(ids, Err(PlacementError::Region { region: 0 }));
    }

    #[test]
    fn supported_placements_region_over_128_is_refused() {
        let ids = supported_placements(129, 1);

        assert_eq!(ids, Err(PlacementError::Region { region: 129 }));
    }

    #[test]
    fn supported_placements_region_of_128_reaches_last_slot() {
        let ids = supported_placements(128, 64);

        assert_eq!(ids, Ok(vec![0, 64]));
    }

    #[test]
    fn max_instances_l40s_16gib_is_two() {
        let max = max_instances(48, 16);

        assert_eq!(max, Ok(2));
    }

    #[test]
    fn max_instances_l40s_1gib_is_sixteen() {
        let max = max_instances(48, 1);

        assert_eq!(max, Ok(16));
    }

    #[test]
    fn max_instances_uneven_region_is_refused() {
        let max = max_instances(94, 4);

        assert_eq!(
            max,
            Err(PlacementError::Uneven {
                region: 94,
                size: 4,
                parts: 8
            })
        );
    }
}
