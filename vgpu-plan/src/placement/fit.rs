//! Whether a multiset of vGPU sizes fits on a GPU beside what is placed, and where.
//!
//! [`fit()`] searches every assignment of supported ids, so its answer is exact. It places the
//! largest sizes first and each size's lowest ids first. vGPUs of one size are interchangeable:
//! it tries their ids in increasing order only, so each set of ids is tried once. A branch
//! stops when what it could still place cannot beat the best found, counting both the sizes
//! left and the free slots. With at most 32 vGPUs and 16 ids per size the search is small.

use super::rule::supported_mask;
use super::slots::SlotMap;
use super::{MAX_VGPUS_PER_GPU, Placed, PlacementError, bits, run};

/// What [`fit()`] found: the most of the sizes that fits, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// Where each vGPU that fits goes, largest first, then by id.
    pub placed: Vec<Placed>,
    /// The sizes that do not fit beside them, largest first.
    pub left_out: Vec<u32>,
}

impl Fit {
    /// Whether every size fits.
    pub fn fits(&self) -> bool {
        self.left_out.is_empty()
    }
}

/// Places as much of `sizes` (GiB each) as fits beside the vGPUs on `map`.
///
/// "As much" is the most GiB, then the most vGPUs. When all of `sizes` fit, [`Fit::placed`] is
/// one assignment of them: the first in the search order (largest sizes first, lowest ids
/// first). The map itself does not change.
///
/// Fails when the rule does not cover one of the sizes on the map's region.
pub fn fit(map: &SlotMap, sizes: &[u32]) -> Result<Fit, PlacementError> {
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut groups: Vec<Group> = Vec::new();
    for &size in &sorted {
        match groups.last_mut() {
            Some(group) if group.size == size => group.count += 1,
            _ => groups.push(Group {
                size,
                count: 1,
                supported: supported_mask(map.region(), size)?,
                after: 0,
            }),
        }
    }
    let mut after = 0;
    for group in groups.iter_mut().rev() {
        group.after = after;
        after += u64::from(group.size) * u64::from(group.count);
    }
    let mut search = Search {
        groups: &groups,
        region_mask: run(map.region()),
        total: after,
        capacity: MAX_VGPUS_PER_GPU.saturating_sub(map.placed().len()),
        chosen: Vec::new(),
        best: Vec::new(),
        best_gib: 0,
        done: false,
    };
    if let Some(first) = groups.first() {
        search.go(0, first.count, 0, map.occupied(), 0);
    }
    let mut left_out = sorted;
    for placed in &search.best {
        if let Some(at) = left_out.iter().position(|&s| s == placed.size) {
            left_out.remove(at);
        }
    }
    Ok(Fit {
        placed: search.best,
        left_out,
    })
}

/// The vGPUs of one size.
struct Group {
    size: u32,
    count: u32,
    supported: u128,
    /// The GiB of the groups after this one.
    after: u64,
}

struct Search<'a> {
    groups: &'a [Group],
    region_mask: u128,
    total: u64,
    capacity: usize,
    chosen: Vec<Placed>,
    best: Vec<Placed>,
    best_gib: u64,
    done: bool,
}

impl Search<'_> {
    /// Places the `left` vGPUs still to place of group `g` at ids from `from` on, then the
    /// groups after it.
    fn go(&mut self, g: usize, left: u32, from: u32, occupied: u128, gib: u64) {
        if gib > self.best_gib || (gib == self.best_gib && self.chosen.len() > self.best.len()) {
            self.best_gib = gib;
            self.best.clone_from(&self.chosen);
            self.done = gib == self.total;
        }
        let Some(group) = self.groups.get(g) else {
            return;
        };
        let free_slots = u64::from((self.region_mask & !occupied).count_ones());
        let reachable = (u64::from(left) * u64::from(group.size) + group.after).min(free_slots);
        if self.done || reachable == 0 || gib + reachable < self.best_gib {
            return;
        }
        if left > 0 && self.chosen.len() < self.capacity {
            let run = run(group.size);
            for id in bits(group.supported).filter(|&id| id >= from) {
                let mask = run << id;
                if occupied & mask != 0 {
                    continue;
                }
                self.chosen.push(Placed {
                    id,
                    size: group.size,
                });
                self.go(
                    g,
                    left - 1,
                    id + 1,
                    occupied | mask,
                    gib + u64::from(group.size),
                );
                self.chosen.pop();
                if self.done {
                    return;
                }
            }
        }
        if let Some(next) = self.groups.get(g + 1) {
            self.go(g + 1, next.count, 0, occupied, gib);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty(region: u32) -> SlotMap {
        SlotMap::new(region).unwrap()
    }

    #[test]
    fn fit_24gb_three_4gib_and_two_6gib_places_two_and_two() {
        let found = fit(&empty(24), &[4, 4, 4, 6, 6]).unwrap();

        assert_eq!(
            found,
            Fit {
                placed: vec![
                    Placed { id: 0, size: 6 },
                    Placed { id: 6, size: 6 },
                    Placed { id: 12, size: 4 },
                    Placed { id: 20, size: 4 },
                ],
                left_out: vec![4],
            }
        );
    }

    #[test]
    fn fit_l40s_two_16gib_and_12gib_leaves_12gib_out() {
        let found = fit(&empty(48), &[16, 12, 16]).unwrap();

        assert_eq!(
            found,
            Fit {
                placed: vec![Placed { id: 0, size: 16 }, Placed { id: 32, size: 16 }],
                left_out: vec![12],
            }
        );
    }

    #[test]
    fn fit_l40s_24_16_8_fits_exactly() {
        let found = fit(&empty(48), &[8, 16, 24]).unwrap();

        assert_eq!(
            found,
            Fit {
                placed: vec![
                    Placed { id: 0, size: 24 },
                    Placed { id: 32, size: 16 },
                    Placed { id: 24, size: 8 },
                ],
                left_out: vec![],
            }
        );
    }

    #[test]
    fn fit_24gb_two_6gib_and_two_4gib_fits() {
        let found = fit(&empty(24), &[6, 4, 6, 4]).unwrap();

        assert!(found.fits());
    }

    #[test]
    fn fit_24gb_four_6gib_fills_the_region() {
        let found = fit(&empty(24), &[6, 6, 6, 6]).unwrap();

        assert_eq!(
            found.placed,
            vec![
                Placed { id: 0, size: 6 },
                Placed { id: 6, size: 6 },
                Placed { id: 12, size: 6 },
                Placed { id: 18, size: 6 },
            ]
        );
    }

    #[test]
    fn fit_beside_placed_vgpu_avoids_its_slots() {
        let mut map = empty(48);
        map.place(0, 1).unwrap();

        let found = fit(&map, &[16, 16]).unwrap();

        assert_eq!(
            found,
            Fit {
                placed: vec![Placed { id: 32, size: 16 }],
                left_out: vec![16],
            }
        );
    }

    #[test]
    fn fit_seventeen_1gib_on_l40s_places_sixteen() {
        let found = fit(&empty(48), &[1; 17]).unwrap();

        assert_eq!((found.placed.len(), found.left_out), (16, vec![1]));
    }

    #[test]
    fn fit_nothing_fits_trivially() {
        let found = fit(&empty(48), &[]).unwrap();

        assert_eq!(
            found,
            Fit {
                placed: vec![],
                left_out: vec![],
            }
        );
    }

    #[test]
    fn fit_uncovered_size_is_refused() {
        let found = fit(&empty(24), &[4, 48]);

        assert_eq!(
            found,
            Err(PlacementError::Size {
                region: 24,
                size: 48
            })
        );
    }
}
