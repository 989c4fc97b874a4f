//! Benchmark: placements in NVIDIA's mixed-size mode on a fleet of L40S GPUs kept near 90%
//! load, and what each chooser refuses.
//!
//! The trace is 100,000 events drawn from a fixed seed (splitmix64): arrivals of one vGPU of
//! 1, 2, 3, 4, 6, 8, 12, 16, 24 or 48 GiB, small sizes more often, and departures of a vGPU
//! that arrived earlier. The trace holds the offered frame buffer near 90% of the fleet's
//! 4,800 GiB: it adds an arrival while the vGPUs offered and not yet gone hold less, and
//! otherwise takes one away at random. Every chooser replays the same trace; a refused
//! arrival's departure does nothing.
//!
//! Four ways to place an arrival:
//!
//! 1. **lowest free**: the first GPU with a free supported id, at its lowest free id (the
//!    driver's default);
//! 2. **first fit, keep room**: the first GPU with a free supported id, at the id
//!    [`Chooser::keep_room`] takes;
//! 3. **ours**: on every GPU the id keep room takes, and of these the one that takes the
//!    least ([`Chooser::rank`], [`Loss`]): first the room it takes as it is likely to come
//!    back, then the free placements it takes away, largest size first. Ties go to the GPU
//!    holding the most vGPUs (one holding few is the likeliest to empty), then the lowest.
//!    This is how `place` ranks GPUs in mixed-size mode. Keep room weighs every free id of a
//!    GPU, so this is an exhaustive search of its measure per request;
//! 4. **best of all, placements kept**: every free placement on every GPU, by the free
//!    placements it takes away alone (the measure's second part, with the same ties). It is
//!    an exhaustive search per request of that measure, not an offline optimum over the
//!    trace.
//!
//! Nearly every refusal is of a 16, 24 or 48 GiB vGPU: a 48 GiB one needs an empty GPU, and
//! which GPU a small vGPU goes to decides that more than where on the GPU it goes.
//!
//! `cargo bench -p vgpu-plan --bench placements` prints the refusals of each and the time per
//! request of each (the whole replay timed, departures included, divided by the arrivals).
//! One trace's refusals vary by some tens. So it then prints those of lowest free and ours on
//! eleven more seeds, and the sum over all twelve traces.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::cmp::Reverse;
use std::time::Instant;

use vgpu_plan::placement::{Chooser, Loss, SlotMap, supported_placements};

const GPUS: usize = 100;
const REGION: u32 = 48;
const EVENTS: usize = 100_000;
const SIZES: [u32; 10] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 48];
/// How often each size arrives, in percent: desktops more often than large vGPUs.
const WEIGHTS: [u64; 10] = [22, 18, 12, 14, 10, 9, 6, 5, 3, 1];
/// The offered load the trace holds: 90% of 100 x 48 GiB.
const TARGET_GIB: u64 = 4_320;

/// splitmix64: a small deterministic generator, so every run replays the same trace.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

enum Event {
    /// A vGPU of this size arrives; arrivals are numbered in order from 0.
    Arrive(u32),
    /// The vGPU of this arrival leaves.
    Depart(usize),
}

fn trace(seed: u64) -> Vec<Event> {
    let mut rng = Rng(seed);
    let mut events = Vec::with_capacity(EVENTS);
    let mut live: Vec<(usize, u32)> = Vec::new();
    let mut live_gib = 0u64;
    let mut arrivals = 0;
    while events.len() < EVENTS {
        if live_gib < TARGET_GIB || live.is_empty() {
            let mut draw = rng.below(100);
            let mut size = SIZES[0];
            for (s, weight) in SIZES.iter().zip(WEIGHTS) {
                if draw < weight {
                    size = *s;
                    break;
                }
                draw -= weight;
            }
            live.push((arrivals, size));
            live_gib += u64::from(size);
            events.push(Event::Arrive(size));
            arrivals += 1;
        } else {
            let (arrival, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
            live_gib -= u64::from(size);
            events.push(Event::Depart(arrival));
        }
    }
    events
}

/// What one replay gave.
struct Replay {
    arrivals: usize,
    refused: usize,
    nanos: u128,
}

/// Replays `events` on an empty fleet; `choose` picks a GPU and id for a size, or none. It
/// is given each GPU's count of changes, so that it may keep what it worked out per GPU.
fn replay(
    events: &[Event],
    mut choose: impl FnMut(&[SlotMap], &[u64], u32) -> Option<(usize, u32)>,
) -> Replay {
    let mut fleet: Vec<SlotMap> = (0..GPUS).map(|_| SlotMap::new(REGION).unwrap()).collect();
    let mut changes = vec![0u64; GPUS];
    let mut at: Vec<Option<(usize, u32)>> = Vec::new();
    let mut refused = 0;
    let started = Instant::now();
    for event in events {
        match *event {
            Event::Arrive(size) => {
                let pick = choose(&fleet, &changes, size);
                match pick {
                    Some((gpu, id)) => {
                        fleet[gpu].place(id, size).unwrap();
                        changes[gpu] += 1;
                    }
                    None => refused += 1,
                }
                at.push(pick);
            }
            Event::Depart(arrival) => {
                if let Some((gpu, id)) = at[arrival] {
                    fleet[gpu].remove(id).unwrap();
                    changes[gpu] += 1;
                }
            }
        }
    }
    Replay {
        arrivals: at.len(),
        refused,
        nanos: started.elapsed().as_nanos(),
    }
}

/// The first GPU on which `chooser` finds a place.
fn first_fit(chooser: &Chooser, fleet: &[SlotMap], size: u32) -> Option<(usize, u32)> {
    fleet
        .iter()
        .enumerate()
        .find_map(|(gpu, map)| chooser.choose(map, size).unwrap().map(|id| (gpu, id)))
}

/// Each GPU's rank per size, with the GPU's count of changes it was worked out at: as
/// `place`'s `Placer` keeps each GPU's slot until a change touches the GPU.
type Ranks = Vec<Vec<Option<(u64, Option<(u32, Loss)>)>>>;

/// How a pick ranks: what it takes away, then the GPU holding the most vGPUs.
type Order<L> = (L, Reverse<usize>);

/// On every GPU the id `chooser` takes; of these the one that takes away the least. A GPU's
/// rank is worked out again only after it changed.
fn ranked(
    chooser: &Chooser,
    ranks: &mut Ranks,
    fleet: &[SlotMap],
    changes: &[u64],
    size: u32,
) -> Option<(usize, u32)> {
    let s = SIZES.iter().position(|&s| s == size).unwrap();
    for (gpu, map) in fleet.iter().enumerate() {
        let memo = &mut ranks[gpu][s];
        if memo.as_ref().is_none_or(|(at, _)| *at != changes[gpu]) {
            *memo = Some((changes[gpu], chooser.rank(map, size).unwrap()));
        }
    }
    let mut best: Option<(Order<&Loss>, usize, u32)> = None;
    for (gpu, memo) in ranks.iter().enumerate() {
        let Some((_, Some((id, loss)))) = &memo[s] else {
            continue;
        };
        let order = (loss, Reverse(fleet[gpu].placed().len()));
        if best.is_none_or(|(least, _, _)| order < least) {
            best = Some((order, gpu, *id));
        }
    }
    best.map(|(_, gpu, id)| (gpu, id))
}

/// A map's free placements of each size, largest first.
fn room(map: &SlotMap) -> Vec<usize> {
    SIZES
        .iter()
        .rev()
        .map(|&s| map.free_placements(s).unwrap().len())
        .collect()
}

/// Every free placement on every GPU; the one that loses the fewest free placements, largest
/// size first.
fn best_of_all(fleet: &[SlotMap], size: u32) -> Option<(usize, u32)> {
    type Pick = (usize, u32);
    let mut best: Option<(Pick, Order<Vec<usize>>)> = None;
    for (gpu, map) in fleet.iter().enumerate() {
        let ids = map.free_placements(size).unwrap();
        if ids.is_empty() {
            continue;
        }
        let before = room(map);
        for id in ids {
            let mut after = map.clone();
            after.place(id, size).unwrap();
            let lost = before.iter().zip(room(&after)).map(|(b, a)| b - a);
            let loss = (lost.collect(), Reverse(map.placed().len()));
            if best.as_ref().is_none_or(|(_, least)| loss < *least) {
                best = Some(((gpu, id), loss));
            }
        }
    }
    best.map(|(pick, _)| pick)
}

fn main() {
    let events = trace(0x5eed_1e55);
    let max_16 = supported_placements(REGION, 16).unwrap().len();
    println!(
        "trace: {} events on {GPUS} L40S ({REGION} slots; 16 GiB has {max_16} placements), offered load held at {TARGET_GIB} GiB",
        events.len()
    );

    let lowest = Chooser::lowest_free();
    let lowest_run = replay(&events, |fleet, _, size| first_fit(&lowest, fleet, size));
    let keep = Chooser::keep_room(&SIZES);
    let first_run = replay(&events, |fleet, _, size| first_fit(&keep, fleet, size));
    let mut ranks: Ranks = vec![vec![None; SIZES.len()]; GPUS];
    let ours_run = replay(&events, |fleet, changes, size| {
        ranked(&keep, &mut ranks, fleet, changes, size)
    });
    let best_run = replay(&events, |fleet, _, size| best_of_all(fleet, size));

    let arrivals = ours_run.arrivals;
    println!("arrivals: {arrivals}");
    let us = |run: &Replay| run.nanos as f64 / arrivals as f64 / 1000.0;
    for (name, run) in [
        ("lowest free", &lowest_run),
        ("first fit, keep room", &first_run),
        ("ours (ranked)", &ours_run),
        ("best of all, kept", &best_run),
    ] {
        println!(
            "{name:21} refused {:4} ({:.2} of lowest free), {:.2} us per request",
            run.refused,
            run.refused as f64 / lowest_run.refused.max(1) as f64,
            us(run)
        );
    }

    let mut all = (lowest_run.refused, ours_run.refused);
    for seed in 1..12 {
        let events = trace(seed);
        let lowest_run = replay(&events, |fleet, _, size| first_fit(&lowest, fleet, size));
        let mut ranks: Ranks = vec![vec![None; SIZES.len()]; GPUS];
        let ours_run = replay(&events, |fleet, changes, size| {
            ranked(&keep, &mut ranks, fleet, changes, size)
        });
        all = (all.0 + lowest_run.refused, all.1 + ours_run.refused);
        println!(
            "seed {seed}: {} arrivals; lowest free refused {}, ours {} ({:.2})",
            ours_run.arrivals,
            lowest_run.refused,
            ours_run.refused,
            ours_run.refused as f64 / lowest_run.refused.max(1) as f64
        );
    }
    println!(
        "all twelve traces: lowest free refused {}, ours {} ({:.3})",
        all.0,
        all.1,
        all.1 as f64 / all.0.max(1) as f64
    );
}
