//! The placement for one new vGPU on a GPU.
//!
//! Without `vgpu-placement-id` the driver takes the lowest free supported id
//! ([`Chooser::lowest_free`]). That fragments the region: a 1 GiB vGPU at 0 blocks a 16 GiB
//! one there. [`Chooser::keep_room`] takes the free id that keeps the most room for the
//! largest types: for each candidate it counts, after placing, the free placements of each
//! size the GPU offers. It compares these counts from the largest size down, and takes the
//! candidate whose counts are greatest in that order (lexicographically); a tie goes to the
//! lowest id. Placements of one size never overlap, so a count is how many vGPUs of that size
//! could still come.

use super::rule::supported_mask;
use super::slots::{SlotMap, free_among};
use super::{PlacementError, bits, run};

/// How to choose a placement for one new vGPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chooser {
    /// The sizes to keep room for, largest first; `None` for the lowest free id.
    keep: Option<Vec<u32>>,
}

impl Chooser {
    /// The driver's default: the lowest free supported id.
    pub fn lowest_free() -> Self {
        Self { keep: None }
    }

    /// The free id that keeps the most room for the largest of `sizes`, the placement sizes of
    /// the types the GPU offers (in any order; repeats do not count).
    pub fn keep_room(sizes: &[u32]) -> Self {
        let mut keep = sizes.to_vec();
        keep.sort_unstable_by(|a, b| b.cmp(a));
        keep.dedup();
        Self { keep: Some(keep) }
    }

    /// The placement id for a new `size` GiB vGPU on `map`, or `None` when no supported id of
    /// it is free (or the GPU is full).
    ///
    /// Fails when the rule does not cover `size`, or one of the sizes to keep room for, on
    /// the map's region.
    pub fn choose(&self, map: &SlotMap, size: u32) -> Result<Option<u32>, PlacementError> {
        let free = map.free_mask(size)?;
        let Some(keep) = &self.keep else {
            return Ok(bits(free).next());
        };
        if free == 0 {
            return Ok(None);
        }
        let kept = keep
            .iter()
            .map(|&s| Ok((s, supported_mask(map.region(), s)?)))
            .collect::<Result<Vec<_>, PlacementError>>()?;
        let run = run(size);
        let mut best: Option<(u32, Vec<u32>)> = None;
        for id in bits(free) {
            let occupied = map.occupied() | run << id;
            let room: Vec<u32> = kept
                .iter()
                .map(|&(s, supported)| free_among(supported, s, occupied).count_ones())
                .collect();
            if best.as_ref().is_none_or(|(_, most)| room > *most) {
                best = Some((id, room));
            }
        }
        Ok(best.map(|(id, _)| id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L40S_SIZES: [u32; 10] = [48, 24, 16, 12, 8, 6, 4, 3, 2, 1];
    const SIZES_24GB: [u32; 8] = [24, 12, 8, 6, 4, 3, 2, 1];

    #[test]
    fn lowest_free_empty_l40s_1gib_is_0() {
        let map = SlotMap::new(48).unwrap();

        let id = Chooser::lowest_free().choose(&map, 1);

        assert_eq!(id, Ok(Some(0)));
    }

    #[test]
    fn lowest_free_skips_held_slots() {
        let mut map = SlotMap::new(48).unwrap();
        map.place(0, 8).unwrap();

        let id = Chooser::lowest_free().choose(&map, 4);

        assert_eq!(id, Ok(Some(8)));
    }

    #[test]
    fn keep_room_empty_l40s_1gib_keeps_both_16gib() {
        let map = SlotMap::new(48).unwrap();

        let id = Chooser::keep_room(&L40S_SIZES).choose(&map, 1);

        assert_eq!(id, Ok(Some(17)));
    }

    #[test]
    fn keep_room_second_1gib_on_l40s_shares_the_4gib_gap() {
        let mut map = SlotMap::new(48).unwrap();
        map.place(17, 1).unwrap();

        let id = Chooser::keep_room(&L40S_SIZES).choose(&map, 1);

        assert_eq!(id, Ok(Some(18)));
    }

    #[test]
    fn keep_room_empty_24gb_4gib_keeps_12gib_at_12() {
        let map = SlotMap::new(24).unwrap();

        let id = Chooser::keep_room(&SIZES_24GB).choose(&map, 4);

        assert_eq!(id, Ok(Some(8)));
    }

    #[test]
    fn keep_room_empty_l40s_8gib_keeps_both_16gib() {
        let map = SlotMap::new(48).unwrap();

        let id = Chooser::keep_room(&L40S_SIZES).choose(&map, 8);

        assert_eq!(id, Ok(Some(16)));
    }

    #[test]
    fn keep_room_no_free_id_is_none() {
        let mut map = SlotMap::new(48).unwrap();
        map.place(0, 48).unwrap();

        let id = Chooser::keep_room(&L40S_SIZES).choose(&map, 1);

        assert_eq!(id, Ok(None));
    }

    #[test]
    fn keep_room_uncovered_size_to_keep_is_refused() {
        let map = SlotMap::new(94).unwrap();

        let id = Chooser::keep_room(&[47, 4]).choose(&map, 47);

        assert_eq!(
            id,
            Err(PlacementError::Uneven {
                region: 94,
                size: 4,
                parts: 8
            })
        );
    }

    #[test]
    fn lowest_free_uncovered_size_is_refused() {
        let map = SlotMap::new(48).unwrap();

        let id = Chooser::lowest_free().choose(&map, 49);

        assert_eq!(
            id,
            Err(PlacementError::Size {
                region: 48,
                size: 49
            })
        );
    }
}
