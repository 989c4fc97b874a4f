//! Benchmark: the planner and placement on a synthetic fleet, and how close `pack` comes to
//! the best possible placement.
//!
//! 1. **Placement**: 10,000 requests (1 or 2 vGPUs of 1, 2, 4, 8, 12, 16 or 24 GiB, small
//!    sizes more often, drawn from a fixed seed) placed one after another on a fleet of 1,000
//!    GPUs (T4, A40, L40S and Flex 170 with 8 VFs, in turn; two NUMA nodes), each request
//!    seeing what the earlier ones made, with `pack` and with `spread`: time, requests
//!    satisfied, vGPUs and frame buffer placed. The requests ask for more than the fleet
//!    holds, so the policies differ in what they leave room for.
//! 2. **Planner**: `plan()` of a four-entry config against the fleet as placement left it.
//! 3. **Quality**: on small instances (6 NVIDIA GPUs, 30 single-vGPU requests), the vGPUs
//!    `pack` places online, in arrival order, against the optimum computed exactly offline:
//!    every GPU holds one type at a time, so the optimum is the best assignment of one size
//!    (or none) to each GPU, enumerated in full.
//!
//! `cargo bench -p vgpu-plan --bench plan` prints the numbers; it asserts nothing about speed.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use vgpu_model::Inventory;
use vgpu_model::pci::PciAddress;
use vgpu_plan::desired::{DesiredFile, Format};
use vgpu_plan::place::{Pick, PlaceRequest, PlaceWant, Placer, Policy, place};
use vgpu_plan::testing::fleet::{self, Model};
use vgpu_plan::{HostState, plan};

const SIZES_GIB: [u64; 7] = [1, 2, 4, 8, 12, 16, 24];
/// How often each size is asked for, in percent: desktops more often than large vGPUs.
const WEIGHTS: [u64; 7] = [30, 25, 20, 10, 7, 5, 3];

/// A small deterministic generator (xorshift64*), so every run places the same requests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn requests(count: usize, seed: u64, max_per_request: u64) -> Vec<PlaceRequest> {
    let mut rng = Rng(seed);
    let size = |rng: &mut Rng| {
        let mut draw = rng.below(100);
        for (gib, weight) in SIZES_GIB.iter().zip(WEIGHTS) {
            if draw < weight {
                return *gib;
            }
            draw -= weight;
        }
        SIZES_GIB[0]
    };
    (0..count)
        .map(|_| PlaceRequest {
            count: 1 + rng.below(max_per_request) as u32,
            want: PlaceWant::Framebuffer {
                mib: size(&mut rng) * 1024,
                series: 'Q',
                round_up: false,
            },
            numa_node: None,
        })
        .collect()
}

fn host(inventory: Inventory) -> HostState {
    HostState {
        inventory,
        ..HostState::default()
    }
}

/// What one replay of the requests gave: requests satisfied, vGPUs placed, GiB placed, time
/// spent choosing, and every answer (for comparing two placers).
struct Replay {
    satisfied: usize,
    placed: u32,
    gib: u64,
    spent: Duration,
    answers: Vec<Option<Vec<Pick>>>,
}

/// Places `requests` in order on `state` with `choose`, recording each placement as the
/// kernel would (`record`).
fn replay(
    requests: &[PlaceRequest],
    mut choose: impl FnMut(&PlaceRequest) -> Option<Vec<Pick>>,
    mut record: impl FnMut(&Pick),
) -> Replay {
    let mut out = Replay {
        satisfied: 0,
        placed: 0,
        gib: 0,
        spent: Duration::ZERO,
        answers: Vec::with_capacity(requests.len()),
    };
    for request in requests {
        let started = Instant::now();
        let result = choose(request);
        out.spent += started.elapsed();
        if let Some(picks) = &result {
            out.satisfied += 1;
            out.placed += picks.len() as u32;
            if let PlaceWant::Framebuffer { mib, .. } = request.want {
                out.gib += mib / 1024 * picks.len() as u64;
            }
            for pick in picks {
                record(pick);
            }
        }
        out.answers.push(result);
    }
    out
}

const CONFIG: &str = r#"version = 1
[configs.default]
[[configs.default.gpu]]
model = "T4"
sizes = "4x4GiB"
[[configs.default.gpu]]
model = "A40"
sizes = "12GiB"
[[configs.default.gpu]]
model = "L40S"
sizes = "2x24GiB"
[[configs.default.gpu]]
model = "Flex 170"
vfs = 8
"#;

/// The capacity of a GPU of `model` for vGPUs of `gib` GiB (Q series): its type's per-GPU
/// maximum, 0 when it has no such type.
fn capacity(model: Model, gib: u64) -> u32 {
    let gpu = fleet::gpu(model, PciAddress::new(0, 1, 0, 0).unwrap(), None);
    gpu.types
        .iter()
        .filter(|t| t.name.as_deref().is_some_and(|n| n.ends_with('Q')))
        .find(|t| t.framebuffer_mib == Some(gib * 1024))
        .and_then(|t| t.max_instances)
        .unwrap_or(0)
}

/// The most single-vGPU requests (`wanted[s]` of size `SIZES_GIB[s]`) the GPUs `models` can
/// hold when each GPU holds one size: every assignment of a size (or none) to each GPU.
fn optimum(models: &[Model], wanted: &[u32; SIZES_GIB.len()]) -> u32 {
    let caps: Vec<[u32; SIZES_GIB.len()]> = models
        .iter()
        .map(|m| std::array::from_fn(|s| capacity(*m, SIZES_GIB[s])))
        .collect();
    let choices = SIZES_GIB.len() + 1;
    let total = choices.pow(models.len() as u32);
    let mut best = 0;
    for code in 0..total {
        let mut held = [0u32; SIZES_GIB.len()];
        let mut rest = code;
        for cap in &caps {
            let choice = rest % choices;
            rest /= choices;
            if choice < SIZES_GIB.len() {
                held[choice] += cap[choice];
            }
        }
        let fits: u32 = held.iter().zip(wanted).map(|(h, w)| (*h).min(*w)).sum();
        best = best.max(fits);
    }
    best
}

fn quality(instances: usize) -> (u32, u32) {
    let models = [
        Model::T4,
        Model::T4,
        Model::A40,
        Model::A40,
        Model::L40s,
        Model::L40s,
    ];
    let (mut packed, mut best) = (0, 0);
    for seed in 1..=instances as u64 {
        let inventory = Inventory {
            gpus: models
                .iter()
                .enumerate()
                .map(|(i, m)| fleet::gpu(*m, PciAddress::new(0, i as u8 + 1, 0, 0).unwrap(), None))
                .collect(),
            warnings: Vec::new(),
        };
        let mut state = host(inventory);
        let requests = requests(30, seed * 7919, 1);
        let mut wanted = [0u32; SIZES_GIB.len()];
        for request in &requests {
            if let PlaceWant::Framebuffer { mib, .. } = request.want {
                let s = SIZES_GIB.iter().position(|g| g * 1024 == mib).unwrap();
                wanted[s] += 1;
            }
        }
        let cell = std::cell::RefCell::new(&mut state);
        packed += replay(
            &requests,
            |r| place(&cell.borrow(), r, Policy::Pack).ok(),
            |pick| fleet::record(&mut cell.borrow_mut().inventory, pick),
        )
        .placed;
        best += optimum(&models, &wanted);
    }
    (packed, best)
}

fn main() {
    let gpus = 1000;
    let requests = requests(10_000, 42, 2);
    let asked: u32 = requests.iter().map(|r| r.count).sum();
    let asked_gib: u64 = requests
        .iter()
        .map(|r| match r.want {
            PlaceWant::Framebuffer { mib, .. } => mib / 1024 * u64::from(r.count),
            PlaceWant::Type(_) => 0,
        })
        .sum();
    let fleet_gib: u64 = (gpus as u64 / 4) * (16 + 48 + 48 + 16);
    println!(
        "fleet: {gpus} GPUs (T4, A40, L40S, Flex 170 in turn), {fleet_gib} GiB; {} requests for {asked} vGPUs, {asked_gib} GiB",
        requests.len()
    );
    let mut packed_state = host(fleet::fleet(gpus));
    for (name, policy) in [("pack", Policy::Pack), ("spread", Policy::Spread)] {
        // The peer: `place` on the whole host for each request.
        let mut state = host(fleet::fleet(gpus));
        let cell = std::cell::RefCell::new(&mut state);
        let scan = replay(
            &requests,
            |r| place(&cell.borrow(), r, policy).ok(),
            |pick| fleet::record(&mut cell.borrow_mut().inventory, pick),
        );
        // The index: a `Placer` kept across requests, told what each pick made.
        let placer = std::cell::RefCell::new(Placer::new(host(fleet::fleet(gpus))));
        let indexed = replay(
            &requests,
            |r| placer.borrow_mut().place(r, policy).ok(),
            |pick| {
                placer
                    .borrow_mut()
                    .update(&[pick.gpu], |h| fleet::record(&mut h.inventory, pick));
            },
        );
        let per = |r: &Replay| r.spent.as_secs_f64() * 1e6 / requests.len() as f64;
        for (how, r) in [("scan", &scan), ("index", &indexed)] {
            println!(
                "place ({name:6}, {how:5}): {} requests satisfied, {} vGPUs and {} GiB placed ({:.0}% of the fleet), {:.1} ms, {:.2} µs per request",
                r.satisfied,
                r.placed,
                r.gib,
                r.gib as f64 * 100.0 / fleet_gib as f64,
                r.spent.as_secs_f64() * 1e3,
                per(r)
            );
        }
        println!(
            "place ({name:6}): the same placements: {}; index/scan time: {:.3}x (goal <= 10 µs per request)",
            if scan.answers == indexed.answers {
                "yes"
            } else {
                "NO"
            },
            per(&indexed) / per(&scan)
        );
        if policy == Policy::Pack {
            packed_state = state;
        }
    }
    let desired = DesiredFile::parse("bench.toml", Format::HostToml, CONFIG).unwrap();
    let config = desired.config(None).unwrap();
    let runs = 10;
    let mut times = Vec::new();
    let mut steps = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let planned = plan(&packed_state, config);
        times.push(started.elapsed());
        steps = planned.changes();
    }
    times.sort();
    println!(
        "plan: {gpus} GPUs, {steps} steps, median {:.2} ms, best {:.2} ms over {runs} runs",
        times[runs / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
    let instances = 50;
    let started = Instant::now();
    let (packed, best) = quality(instances);
    println!(
        "quality: {instances} instances of 6 GPUs (2 T4, 2 A40, 2 L40S) and 30 single-vGPU requests: pack placed {packed} vGPUs online, the exact offline optimum is {best} ({:.1}%), computed in {:.1} s",
        f64::from(packed) * 100.0 / f64::from(best.max(1)),
        started.elapsed().as_secs_f64()
    );
}
