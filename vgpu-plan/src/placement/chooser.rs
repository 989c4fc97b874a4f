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
//!
//! Between GPUs the same measure decides ([`Chooser::rank`]): the pick that takes away the
//! fewest free placements of the largest size, then of the next ([`Loss`]). An empty GPU
//! loses its whole-GPU placement, so it comes after any GPU where the vGPU fits beside others.

use std::cmp::Ordering;

use super::rule::supported_mask;
use super::slots::{Placed, SlotMap, free_among};
use super::{PlacementError, bits, run};

/// The free placements one new vGPU takes away, per placement size: what [`Chooser::rank`]
/// compares GPUs by. Fewer of the largest size is less; a size counts as 0 where a GPU does
/// not offer it, so GPUs of different models compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loss {
    /// (placement size, placements lost), largest size first, only sizes that lose one.
    lost: Vec<(u32, u32)>,
}

impl Loss {
    /// The loss of `lost` (size, placements) pairs, in any order.
    pub fn new(mut lost: Vec<(u32, u32)>) -> Self {
        lost.retain(|(_, n)| *n > 0);
        lost.sort_unstable_by_key(|&(size, _)| std::cmp::Reverse(size));
        Self { lost }
    }

    /// The placements lost of `size`.
    pub fn of(&self, size: u32) -> u32 {
        self.lost
            .iter()
            .find(|(s, _)| *s == size)
            .map_or(0, |(_, n)| *n)
    }
}

impl Ord for Loss {
    fn cmp(&self, other: &Self) -> Ordering {
        // Both lists hold only sizes that lose a placement, largest first: walking them
        // together, the largest size only one of them lists decides against it.
        let (mut mine, mut theirs) = (self.lost.iter(), other.lost.iter());
        loop {
            match (mine.next(), theirs.next()) {
                (None, None) => return Ordering::Equal,
                (Some(_), None) => return Ordering::Greater,
                (None, Some(_)) => return Ordering::Less,
                (Some(a), Some(b)) if a.0 != b.0 => return a.0.cmp(&b.0),
                (Some(a), Some(b)) if a.1 != b.1 => return a.1.cmp(&b.1),
                _ => {}
            }
        }
    }
}

impl PartialOrd for Loss {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

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
        Ok(self.rank(map, size)?.map(|(id, _)| id))
    }

    /// Places `sizes` one after another, in the order given, each where [`Chooser::choose`]
    /// puts it beside those before it: what one `create` per vGPU in that order makes. `None`
    /// when one of them finds no free placement; [`fit()`](super::fit()) may still find an
    /// assignment then.
    ///
    /// Fails as [`Chooser::choose`] fails.
    pub fn place_in_turn(
        &self,
        map: &SlotMap,
        sizes: &[u32],
    ) -> Result<Option<Vec<Placed>>, PlacementError> {
        let mut map = map.clone();
        let mut placed = Vec::with_capacity(sizes.len());
        for &size in sizes {
            let Some(id) = self.choose(&map, size)? else {
                return Ok(None);
            };
            map.place(id, size)?;
            placed.push(Placed { id, size });
        }
        Ok(Some(placed))
    }

    /// [`Chooser::choose`], with the free placements the pick takes away from each size the
    /// chooser keeps room for: what ranks one GPU's pick against another's. The lowest free
    /// id keeps room for nothing, so its loss is always empty.
    ///
    /// Fails as [`Chooser::choose`] fails.
    pub fn rank(&self, map: &SlotMap, size: u32) -> Result<Option<(u32, Loss)>, PlacementError> {
        let free = map.free_mask(size)?;
        let Some(keep) = &self.keep else {
            return Ok(bits(free).next().map(|id| (id, Loss::default())));
        };
        if free == 0 {
            return Ok(None);
        }
        let kept = keep
            .iter()
            .map(|&s| Ok((s, supported_mask(map.region(), s)?)))
            .collect::<Result<Vec<_>, PlacementError>>()?;
        let room_of = |occupied: u128| -> Vec<u32> {
            kept.iter()
                .map(|&(s, supported)| free_among(supported, s, occupied).count_ones())
                .collect()
        };
        let run = run(size);
        let mut best: Option<(u32, Vec<u32>)> = None;
        for id in bits(free) {
            let room = room_of(map.occupied() | run << id);
            if best.as_ref().is_none_or(|(_, most)| room > *most) {
                best = Some((id, room));
            }
        }
        let before = room_of(map.occupied());
        Ok(best.map(|(id, after)| {
            let lost = kept
                .iter()
                .zip(before.iter().zip(after))
                .map(|(&(s, _), (b, a))| (s, b.saturating_sub(a)))
                .collect();
            (id, Loss::new(lost))
        }))
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

    #[test]
    fn loss_orders_by_the_largest_size_lost_first() {
        let none = Loss::default();
        let small = Loss::new(vec![(1, 3), (2, 2), (48, 0)]);
        let one_16 = Loss::new(vec![(16, 1), (1, 1)]);
        let one_24 = Loss::new(vec![(24, 1)]);
        let two_16 = Loss::new(vec![(1, 0), (16, 2)]);

        let mut all = vec![
            one_24.clone(),
            two_16.clone(),
            small.clone(),
            one_16.clone(),
            none.clone(),
        ];
        all.sort();

        assert_eq!(all, [none, small, one_16, two_16, one_24]);
        assert_eq!(Loss::new(vec![(8, 1), (4, 2)]).of(4), 2);
    }

    #[test]
    fn rank_empty_l40s_1gib_at_17_loses_no_16gib_nor_4gib_placement() {
        let map = SlotMap::new(48).unwrap();

        let ranked = Chooser::keep_room(&L40S_SIZES)
            .rank(&map, 1)
            .unwrap()
            .unwrap();

        assert_eq!(ranked.0, 17);
        let lost: Vec<u32> = L40S_SIZES.iter().map(|&s| ranked.1.of(s)).collect();
        // Sizes 48 to 1: 16 GiB goes at 0 and 32 only, and 4 GiB leaves slots 16 to 19.
        assert_eq!(lost, [1, 1, 0, 1, 1, 1, 0, 1, 1, 1]);
    }

    #[test]
    fn rank_prefers_a_gpu_where_the_vgpu_fits_beside_others_to_an_empty_one() {
        let empty = SlotMap::new(48).unwrap();
        let mut used = SlotMap::new(48).unwrap();
        used.place(17, 1).unwrap();
        let keep = Chooser::keep_room(&L40S_SIZES);

        let (_, on_empty) = keep.rank(&empty, 1).unwrap().unwrap();
        let (id, on_used) = keep.rank(&used, 1).unwrap().unwrap();

        assert!(on_used < on_empty);
        assert_eq!((id, on_used.of(48), on_used.of(16)), (18, 0, 0));
        assert_eq!(
            Chooser::lowest_free().rank(&used, 1).unwrap(),
            Some((0, Loss::default()))
        );
    }

    #[test]
    fn place_in_turn_takes_each_choice_in_order_and_gives_up_where_one_finds_none() {
        let keep = Chooser::keep_room(&L40S_SIZES);
        let map = SlotMap::new(48).unwrap();

        let placed = keep.place_in_turn(&map, &[1, 16, 16]).unwrap();
        // In this order the 4 GiB vGPU takes a slot the 12 or the 8 GiB one needs; the exact
        // search finds where all four go.
        let stuck = keep.place_in_turn(&map, &[24, 4, 12, 8]).unwrap();
        let found = crate::placement::fit(&map, &[24, 4, 12, 8]).unwrap();

        let at = |id, size| Placed { id, size };
        assert_eq!(placed, Some(vec![at(17, 1), at(0, 16), at(32, 16)]));
        assert_eq!(stuck, None);
        assert!(found.fits());
    }
}
