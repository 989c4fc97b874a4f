//! The placement for one new vGPU on a GPU.
//!
//! Without `vgpu-placement-id` the driver takes the lowest free supported id
//! ([`Chooser::lowest_free`]). That fragments the region: a 1 GiB vGPU at 0 blocks a 16 GiB
//! one there. [`Chooser::keep_room`] takes the free id that takes the least room from larger
//! vGPUs to come, by one measure ([`Loss`]), in two parts:
//!
//! 1. **The room it takes, as it is likely to come back.** Every placement of a larger size
//!    that the new vGPU falls in counts for its size in GiB. Such a placement is free again
//!    only once every vGPU in it has gone. So each vGPU already in it divides its count by 4:
//!    a vGPU beside many others takes little that would come back soon.
//! 2. **The placements it takes away now**: the free placements of each size after it,
//!    compared from the largest size down. Placements of one size never overlap, so a count
//!    is how many vGPUs of that size could still come.
//!
//! The first part decides; the second breaks its ties, then the lowest id. Between GPUs the
//! same measure decides ([`Chooser::rank`]). An empty GPU loses its whole-GPU placement at
//! full count, so it comes after any GPU of its model where the vGPU fits beside others.
//!
//! The factor of 4 refused the fewest vGPUs on `cargo bench -p vgpu-plan --bench placements`
//! among factors from 1.4 to 10. The second part alone refused about 4% more there.

use std::cmp::Ordering;
use std::sync::OnceLock;

use super::rule::supported_mask;
use super::slots::{Placed, SlotMap, free_among, reach};
use super::{MAX_REGION_SLOTS, PlacementError, bits, count, run};

/// What one new vGPU takes from larger vGPUs to come: what [`Chooser::rank`] compares the
/// free ids of a GPU, and GPUs, by. Less is better. A size counts as 0 where a GPU does not
/// offer it, so GPUs of different models compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loss {
    /// The room taken as it is likely to come back (the module's first part), in GiB times
    /// 4^16: a larger placement held by 16 vGPUs or more counts nothing. Compared first.
    cost: u64,
    /// (placement size, placements lost), largest size first, only sizes that lose one.
    lost: Vec<(u32, u32)>,
}

/// Each vGPU already in a larger placement divides its count by 2^this.
const HELD_SHIFT: u32 = 2;

/// From this many vGPUs in it, a larger placement counts nothing: it keeps a count within
/// `u64` (128 GiB times 4^16, for the few placements one vGPU falls in).
const HOLDERS_COUNTED: u32 = 16;

/// What a larger placement of `size` GiB held by `holders` vGPUs counts for.
fn weight(size: u32, holders: u32) -> u64 {
    match HOLDERS_COUNTED.checked_sub(holders) {
        Some(left) if left > 0 => u64::from(size) << (HELD_SHIFT * left),
        _ => 0,
    }
}

impl Loss {
    /// The loss of `cost` (in the units [`Loss::cost`] gives) and of `lost` (size,
    /// placements) pairs, in any order.
    pub fn new(cost: u64, mut lost: Vec<(u32, u32)>) -> Self {
        lost.retain(|(_, n)| *n > 0);
        lost.sort_unstable_by_key(|&(size, _)| std::cmp::Reverse(size));
        Self { cost, lost }
    }

    /// The room taken as it is likely to come back: the sum, over the larger placements the
    /// vGPU falls in, of each one's size in GiB times 4^(16 - the vGPUs in it).
    pub fn cost(&self) -> u64 {
        self.cost
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
        if self.cost != other.cost {
            return self.cost.cmp(&other.cost);
        }
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
#[derive(Debug, Clone)]
pub struct Chooser {
    /// The sizes to keep room for, largest first; `None` for the lowest free id.
    keep: Option<Vec<u32>>,
    /// The supported ids of each size kept, and the larger placements of each, on the first
    /// region asked: worked out once, as a chooser serves one GPU model.
    kept: OnceLock<Kept>,
}

/// A region, and each kept size with its supported ids there (or why the rule does not
/// cover one).
type Kept = (u32, Result<Tables, PlacementError>);

/// A chooser's tables on one region.
#[derive(Debug, Clone)]
struct Tables {
    /// Each kept size, largest first, with its supported ids.
    kept: Vec<(u32, u128)>,
    /// For each kept size, in that order, the larger placements a vGPU of it may fall in
    /// ([`larger_than`]).
    larger: Vec<Vec<Larger>>,
}

/// A placement of a larger size: its size, its slots, and the ids from which a vGPU of the
/// smaller size meets them.
type Larger = (u32, u128, u128);

impl Tables {
    fn new(sizes: &[u32], region: u32) -> Result<Self, PlacementError> {
        let kept = supported_of(sizes, region)?;
        let larger = kept.iter().map(|&(s, _)| larger_than(&kept, s)).collect();
        Ok(Self { kept, larger })
    }
}

/// Every placement of a kept size larger than `size`, with the ids from which a `size` GiB
/// vGPU meets it.
fn larger_than(kept: &[(u32, u128)], size: u32) -> Vec<Larger> {
    kept.iter()
        .filter(|&&(s, _)| s > size)
        .flat_map(|&(s, supported)| {
            bits(supported).map(move |at| {
                let block = run(s) << at;
                (s, block, reach(block, size))
            })
        })
        .collect()
}

impl PartialEq for Chooser {
    fn eq(&self, other: &Self) -> bool {
        self.keep == other.keep
    }
}

impl Eq for Chooser {}

/// Each of `sizes` with its supported ids on `region`.
fn supported_of(sizes: &[u32], region: u32) -> Result<Vec<(u32, u128)>, PlacementError> {
    sizes
        .iter()
        .map(|&s| Ok((s, supported_mask(region, s)?)))
        .collect()
}

impl Chooser {
    /// The driver's default: the lowest free supported id.
    pub fn lowest_free() -> Self {
        Self {
            keep: None,
            kept: OnceLock::new(),
        }
    }

    /// The free id that takes the least room from the larger of `sizes` ([`Loss`]), the
    /// placement sizes of the types the GPU offers (in any order; repeats do not count).
    pub fn keep_room(sizes: &[u32]) -> Self {
        let mut keep = sizes.to_vec();
        keep.sort_unstable_by(|a, b| b.cmp(a));
        keep.dedup();
        Self {
            keep: Some(keep),
            kept: OnceLock::new(),
        }
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

    /// [`Chooser::choose`], with what the pick takes from the sizes the chooser keeps room
    /// for ([`Loss`]): what ranks one GPU's pick against another's. The lowest free id keeps
    /// room for nothing, so its loss is always empty.
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
        let region = map.region();
        let cached = self
            .kept
            .get_or_init(|| (region, Tables::new(keep, region)));
        let other_region;
        let tables: &Tables = if cached.0 == region {
            cached.1.as_ref().map_err(|e| *e)?
        } else {
            other_region = Tables::new(keep, region)?;
            &other_region
        };
        let kept = &tables.kept[..];
        let other_size;
        let larger: &[Larger] = match kept.iter().position(|&(s, _)| s == size) {
            Some(i) => &tables.larger[i],
            None => {
                other_size = larger_than(kept, size);
                &other_size
            }
        };
        let room_of = |occupied: u128| -> Vec<u32> {
            kept.iter()
                .map(|&(s, supported)| count(free_among(supported, s, occupied)))
                .collect()
        };
        // What each free id takes: every placement of a larger size it falls in, at what
        // that placement counts for now.
        let holders = map.holders();
        let mut cost = [0u64; MAX_REGION_SLOTS as usize];
        for &(s, block, reach) in larger {
            let meets = free & reach;
            if meets == 0 {
                continue;
            }
            let counts = weight(s, holders.of(block));
            for id in bits(meets) {
                cost[id as usize] += counts;
            }
        }
        // The least cost decides; among the ids at it, the most room, largest size first.
        let Some(least) = bits(free).map(|id| cost[id as usize]).min() else {
            return Ok(None);
        };
        let new = run(size);
        let mut best: Option<(u32, Vec<u32>)> = None;
        let mut room = Vec::with_capacity(kept.len());
        for id in bits(free).filter(|&id| cost[id as usize] == least) {
            let occupied = map.occupied() | new << id;
            room.clear();
            room.extend(
                kept.iter()
                    .map(|&(s, supported)| count(free_among(supported, s, occupied))),
            );
            if best.as_ref().is_none_or(|(_, most)| room > *most) {
                best = Some((id, room.clone()));
            }
        }
        let best = best.map(|(id, room)| (least, room, id));
        let before = room_of(map.occupied());
        Ok(best.map(|(cost, after, id)| {
            let lost = kept
                .iter()
                .zip(before.iter().zip(after))
                .map(|(&(s, _), (b, a))| (s, b.saturating_sub(a)))
                .collect();
            (id, Loss::new(cost, lost))
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
    fn loss_orders_by_cost_then_the_largest_size_lost_first() {
        let none = Loss::default();
        let dearer = Loss::new(1, vec![]);
        let small = Loss::new(0, vec![(1, 3), (2, 2), (48, 0)]);
        let one_16 = Loss::new(0, vec![(16, 1), (1, 1)]);
        let one_24 = Loss::new(0, vec![(24, 1)]);
        let two_16 = Loss::new(0, vec![(1, 0), (16, 2)]);

        let mut all = vec![
            dearer.clone(),
            one_24.clone(),
            two_16.clone(),
            small.clone(),
            one_16.clone(),
            none.clone(),
        ];
        all.sort();

        assert_eq!(all, [none, small, one_16, two_16, one_24, dearer]);
        assert_eq!(Loss::new(0, vec![(8, 1), (4, 2)]).of(4), 2);
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
    fn rank_puts_a_vgpu_in_the_half_more_vgpus_hold() {
        // Slots 17, 18, 41 and 42 are held, as the driver's answer shows them. Where two
        // vGPUs are known to hold two of them, that half is the less likely to empty.
        let mut placed = SlotMap::new(48).unwrap();
        for id in [17, 18, 41, 42] {
            placed.place(id, 1).unwrap();
        }
        let free: Vec<(u32, u32)> = L40S_SIZES
            .iter()
            .flat_map(|&s| {
                placed
                    .free_placements(s)
                    .unwrap()
                    .into_iter()
                    .map(move |id| (id, s))
            })
            .collect();
        let seen = SlotMap::with_free(48, &free).unwrap();
        let (mut low, mut high) = (seen.clone(), seen.clone());
        low.hold(17, 1).unwrap();
        low.hold(18, 1).unwrap();
        high.hold(41, 1).unwrap();
        high.hold(42, 1).unwrap();
        let keep = Chooser::keep_room(&L40S_SIZES);

        let at = |map: &SlotMap| keep.choose(map, 1).unwrap();

        assert_eq!(
            (at(&low), at(&high), at(&placed)),
            (Some(23), Some(36), Some(23))
        );
    }

    #[test]
    fn rank_weighs_a_larger_placement_less_for_each_vgpu_in_it() {
        let keep = Chooser::keep_room(&[48, 24]);
        let mut one = SlotMap::new(48).unwrap();
        one.place(0, 24).unwrap();
        let mut two = SlotMap::new(48).unwrap();
        two.place(0, 24).unwrap();
        two.place(24, 1).unwrap();

        let cost = |map: &SlotMap| keep.rank(map, 1).unwrap().unwrap().1.cost();

        // 48 GiB x 4^(16 - vGPUs in it), and the free 24 GiB half at 4^16.
        assert_eq!(cost(&SlotMap::new(48).unwrap()), (48 + 24) << 32);
        assert_eq!(cost(&one), (48 << 30) + (24 << 32));
        assert_eq!(cost(&two), (48 << 28) + (24 << 30));
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
