//! A GPU's occupancy in mixed-size mode: which slots each placed vGPU holds.

use super::rule::supported_mask;
use super::{MAX_REGION_SLOTS, MAX_VGPUS_PER_GPU, PlacementError, bits, count, run};

/// A vGPU on a GPU: its placement id and size; it holds the slots `[id, id + size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Placed {
    /// The placement id: its first slot.
    pub id: u32,
    /// The placement size in GiB: its count of slots.
    pub size: u32,
}

impl Placed {
    /// The slots it holds, as a mask.
    pub(super) fn mask(self) -> u128 {
        run(self.size) << self.id
    }
}

/// Who holds a map's slots: the vGPUs recorded, and held slots none of them accounts for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Holders {
    /// The slots the recorded vGPUs hold.
    known: u128,
    /// The first slot of each recorded vGPU.
    starts: u128,
    /// Held slots no recorded vGPU accounts for.
    unknown: u128,
    /// The most vGPUs those slots may hold.
    unrecorded: u32,
}

impl Holders {
    /// How many vGPUs hold slots of `block`, a run of slots: the recorded vGPUs that start in
    /// it or run into it, and each run of unaccounted held slots in it as one, up to the
    /// vGPUs not recorded (a map made by [`SlotMap::with_free`] does not say how many vGPUs
    /// hold a run).
    pub(super) fn of(&self, block: u128) -> u32 {
        let first = block & block.wrapping_neg();
        let runs_in = u32::from(self.known & first != 0 && self.starts & first == 0);
        let unknown = self.unknown & block;
        let runs = count(unknown & !(unknown << 1)).min(self.unrecorded);
        count(self.starts & block) + runs_in + runs
    }
}

/// The vGPUs on one GPU and the slots they hold. Every vGPU is at a supported id of its
/// size, no two overlap, and there are at most 32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    region: u32,
    occupied: u128,
    placed: Vec<Placed>,
    /// How many vGPUs hold slots without being recorded, where known
    /// ([`SlotMap::set_unrecorded`]).
    unrecorded: Option<u32>,
}

impl SlotMap {
    /// An empty GPU with a region of `region` slots (1 to 128).
    pub fn new(region: u32) -> Result<Self, PlacementError> {
        if region == 0 || region > MAX_REGION_SLOTS {
            return Err(PlacementError::Region { region });
        }
        Ok(Self {
            region,
            occupied: 0,
            placed: Vec::new(),
            unrecorded: None,
        })
    }

    /// A GPU whose only free slots are those of the placements `free` (id, size) lists: every
    /// other slot is held. For a GPU known by where vGPUs can go rather than where they are.
    ///
    /// Fails for a region of no slots or more than 128.
    pub fn with_free(region: u32, free: &[(u32, u32)]) -> Result<Self, PlacementError> {
        let mut map = Self::new(region)?;
        let open = free
            .iter()
            .filter(|(id, size)| *size > 0 && id.saturating_add(*size) <= region)
            .fold(0u128, |acc, &(id, size)| acc | run(size) << id);
        map.occupied = run(region) & !open;
        Ok(map)
    }

    /// The region's slots.
    pub fn region(&self) -> u32 {
        self.region
    }

    /// The vGPUs placed, by id.
    pub fn placed(&self) -> &[Placed] {
        &self.placed
    }

    /// Whether the GPU holds the most vGPUs it may.
    pub fn is_full(&self) -> bool {
        self.placed.len() >= MAX_VGPUS_PER_GPU
    }

    /// The slots held, as a mask.
    pub(super) fn occupied(&self) -> u128 {
        self.occupied
    }

    /// The supported ids of `size` whose slots are all free, as a mask; none when full.
    pub(super) fn free_mask(&self, size: u32) -> Result<u128, PlacementError> {
        let supported = supported_mask(self.region, size)?;
        if self.is_full() {
            return Ok(0);
        }
        Ok(free_among(supported, size, self.occupied))
    }

    /// The free placements of a `size` GiB type: its supported ids whose slots are all free,
    /// lowest first; none when the GPU is full.
    ///
    /// Fails when the rule does not cover the size on this region.
    pub fn free_placements(&self, size: u32) -> Result<Vec<u32>, PlacementError> {
        Ok(bits(self.free_mask(size)?).collect())
    }

    /// Places a `size` GiB vGPU at `id`.
    ///
    /// Fails when the rule does not cover the size, `id` is not a supported id of it, the GPU
    /// is full, or a placed vGPU holds one of its slots.
    pub fn place(&mut self, id: u32, size: u32) -> Result<(), PlacementError> {
        let new = self.vacant(id, size)?;
        self.record(new);
        Ok(())
    }

    /// Records a `size` GiB vGPU at `id` whose slots the map already holds: on a map made by
    /// [`SlotMap::with_free`], a vGPU known from where the driver reports it. Which vGPUs
    /// hold the slots matters to [`Chooser::rank`](super::Chooser::rank).
    ///
    /// Fails as [`SlotMap::place`] fails, and when one of its slots is free.
    pub fn hold(&mut self, id: u32, size: u32) -> Result<(), PlacementError> {
        let new = self.vacant(id, size)?;
        if self.occupied & new.mask() != new.mask() {
            return Err(PlacementError::NotHeld { id, size });
        }
        self.record(new);
        Ok(())
    }

    /// A vGPU at `id` that may be recorded: a supported id, on a GPU not full, overlapping
    /// no vGPU recorded.
    fn vacant(&self, id: u32, size: u32) -> Result<Placed, PlacementError> {
        let supported = supported_mask(self.region, size)?;
        if id >= 128 || supported & 1u128 << id == 0 {
            return Err(PlacementError::NotSupported { id, size });
        }
        if self.is_full() {
            return Err(PlacementError::Full);
        }
        let new = Placed { id, size };
        if let Some(other) = self.placed.iter().find(|p| p.mask() & new.mask() != 0) {
            return Err(PlacementError::Overlaps {
                id,
                size,
                other: other.id,
            });
        }
        Ok(new)
    }

    /// Says how many vGPUs hold slots of a map made by [`SlotMap::with_free`] without being
    /// recorded ([`SlotMap::hold`]). A run of held slots none of them accounts for then counts
    /// as one vGPU only while such vGPUs are left: a held slot beside a recorded vGPU may be
    /// one no placement can use, not another vGPU.
    pub fn set_unrecorded(&mut self, count: u32) {
        self.unrecorded = Some(count);
    }

    /// Who holds its slots, to count the vGPUs in a block ([`Holders::of`]).
    pub(super) fn holders(&self) -> Holders {
        let (known, starts) = self
            .placed
            .iter()
            .fold((0u128, 0u128), |(known, starts), p| {
                (known | p.mask(), starts | 1u128 << p.id)
            });
        Holders {
            known,
            starts,
            unknown: self.occupied & !known,
            unrecorded: self.unrecorded.unwrap_or(u32::MAX),
        }
    }

    fn record(&mut self, new: Placed) {
        let at = self.placed.partition_point(|p| p.id < new.id);
        self.placed.insert(at, new);
        self.occupied |= new.mask();
    }

    /// Removes the vGPU at `id` and returns it.
    ///
    /// Fails when no vGPU is placed at `id`.
    pub fn remove(&mut self, id: u32) -> Result<Placed, PlacementError> {
        let at = self
            .placed
            .binary_search_by_key(&id, |p| p.id)
            .map_err(|_| PlacementError::NotPlaced { id })?;
        let gone = self.placed.remove(at);
        self.occupied &= !gone.mask();
        Ok(gone)
    }
}

/// The ids in `supported` whose `size` slots miss `occupied`.
pub(super) fn free_among(supported: u128, size: u32, occupied: u128) -> u128 {
    supported & !reach(occupied, size)
}

/// The ids from which a run of `size` slots meets `mask`: each slot of it, and the `size - 1`
/// before each.
pub(super) fn reach(mask: u128, size: u32) -> u128 {
    // Bit `i` is set when a slot in `[i, i + covered)` is in `mask`: each step doubles
    // `covered` (or finishes it), so a size takes a handful of shifts.
    let mut reach = mask;
    let mut covered = 1;
    while covered < size {
        let step = covered.min(size - covered);
        reach |= reach >> step;
        covered += step;
    }
    reach
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_among_is_every_id_whose_slots_are_free() {
        let naive = |supported: u128, size: u32, occupied: u128| {
            bits(supported)
                .filter(|&id| occupied & run(size) << id == 0)
                .fold(0u128, |mask, id| mask | 1u128 << id)
        };
        let patterns = [
            0u128,
            1,
            1 << 47,
            0xf0f0_f0f0_f0f0,
            0x8000_0001_0000,
            run(48) ^ 1 << 17,
        ];
        for size in 1..=48 {
            let supported = run(49 - size);
            for occupied in patterns {
                assert_eq!(
                    free_among(supported, size, occupied),
                    naive(supported, size, occupied),
                    "size {size}, occupied {occupied:#x}"
                );
            }
        }
    }

    #[test]
    fn slot_map_new_empty_region_is_refused() {
        let map = SlotMap::new(0);

        assert_eq!(map, Err(PlacementError::Region { region: 0 }));
    }

    #[test]
    fn free_placements_empty_l40s_16gib_are_both() {
        let map = SlotMap::new(48).unwrap();

        assert_eq!(map.free_placements(16), Ok(vec![0, 32]));
    }

    #[test]
    fn free_placements_after_1gib_at_0_lose_16gib_at_0() {
        let mut map = SlotMap::new(48).unwrap();
        map.place(0, 1).unwrap();

        assert_eq!(map.free_placements(16), Ok(vec![32]));
    }

    #[test]
    fn free_placements_uncovered_size_is_refused() {
        let map = SlotMap::new(24).unwrap();

        assert_eq!(
            map.free_placements(30),
            Err(PlacementError::Size {
                region: 24,
                size: 30
            })
        );
    }

    #[test]
    fn place_supported_free_id_is_recorded() {
        let mut map = SlotMap::new(24).unwrap();

        map.place(12, 6).unwrap();

        assert_eq!(map.placed(), &[Placed { id: 12, size: 6 }]);
    }

    #[test]
    fn place_unsupported_id_is_refused() {
        let mut map = SlotMap::new(48).unwrap();

        let placed = map.place(16, 16);

        assert_eq!(
            placed,
            Err(PlacementError::NotSupported { id: 16, size: 16 })
        );
    }

    #[test]
    fn place_id_past_the_mask_is_refused() {
        let mut map = SlotMap::new(48).unwrap();

        let placed = map.place(500, 1);

        assert_eq!(
            placed,
            Err(PlacementError::NotSupported { id: 500, size: 1 })
        );
    }

    #[test]
    fn place_overlapping_is_refused() {
        let mut map = SlotMap::new(24).unwrap();
        map.place(0, 12).unwrap();

        let placed = map.place(8, 4);

        assert_eq!(
            placed,
            Err(PlacementError::Overlaps {
                id: 8,
                size: 4,
                other: 0
            })
        );
    }

    #[test]
    fn remove_placed_frees_its_slots() {
        let mut map = SlotMap::new(48).unwrap();
        map.place(0, 1).unwrap();

        let gone = map.remove(0);

        assert_eq!(
            (gone, map.free_placements(16)),
            (Ok(Placed { id: 0, size: 1 }), Ok(vec![0, 32]))
        );
    }

    #[test]
    fn remove_unplaced_id_is_refused() {
        let mut map = SlotMap::new(48).unwrap();

        let gone = map.remove(3);

        assert_eq!(gone, Err(PlacementError::NotPlaced { id: 3 }));
    }

    #[test]
    fn hold_records_a_vgpu_on_held_slots_and_refuses_a_free_one() {
        // Free: one 24 GiB half; slots 0 to 23 held.
        let mut map = SlotMap::with_free(48, &[(24, 24)]).unwrap();

        let held = map.hold(0, 12);
        let on_free = map.hold(24, 1);
        let again = map.hold(0, 1);

        assert_eq!(held, Ok(()));
        assert_eq!(on_free, Err(PlacementError::NotHeld { id: 24, size: 1 }));
        assert_eq!(
            again,
            Err(PlacementError::Overlaps {
                id: 0,
                size: 1,
                other: 0
            })
        );
        assert_eq!(map.placed(), [Placed { id: 0, size: 12 }]);
        assert_eq!(map.free_placements(24), Ok(vec![24]));
    }

    #[test]
    fn holders_count_vgpus_in_a_block_and_each_unaccounted_run_as_one() {
        // Held: a 12 GiB vGPU at 0 (recorded), and slots 12 to 15 and 17 unaccounted.
        let mut map = SlotMap::with_free(48, &[(16, 1), (18, 6), (24, 24)]).unwrap();
        map.hold(0, 12).unwrap();
        let holders = map.holders();

        let of = |at: u32, size: u32| holders.of(run(size) << at);

        // The first half: the vGPU, the run 12 to 15, the run at 17. A block starting in
        // the vGPU counts it too; the empty second half counts none.
        assert_eq!((of(0, 24), of(8, 8), of(16, 8), of(24, 24)), (3, 2, 1, 0));
    }

    #[test]
    fn holders_count_no_unaccounted_run_once_every_vgpu_is_recorded() {
        // A 1 GiB vGPU at 5 leaves slot 4 of no use: the driver's answer shows 4 and 5 held.
        let free: Vec<(u32, u32)> = (0..48)
            .filter(|s| !(4..6).contains(s))
            .map(|s| (s, 1))
            .collect();
        let mut map = SlotMap::with_free(48, &free).unwrap();
        map.hold(5, 1).unwrap();
        let before = map.holders().of(run(8));

        map.set_unrecorded(0);

        assert_eq!((before, map.holders().of(run(8))), (2, 1));
    }
}
