//! NVIDIA's mixed-size mode: where time-sliced vGPUs of several sizes go on one GPU.
//!
//! In mixed-size mode (vGPU 17 / R550 and later) a GPU's frame buffer is a region of 1-GiB
//! slots: 48 on an L40S, 24 on a 24-GB GPU (L4, A10), 80 on an H100 80GB. A type's placement
//! size is its frame buffer in GiB. A vGPU of size `s` at placement id `p` holds the slots
//! `[p, p + s)`, and `p` must be one of the type's supported ids. At most 32 vGPUs share a
//! GPU. So whether vGPUs fit is not a sum of frame buffer: it depends on where each one goes.
//!
//! - [`rule`]: the supported ids of a size on a region ([`supported_placements`]) and the
//!   type's maximum in mixed mode ([`max_instances`]);
//! - [`slots`]: a GPU's occupancy ([`SlotMap`]): the free placements of a size, place, remove;
//! - [`fit`](mod@fit): whether a multiset of sizes fits beside what is placed, the most of it
//!   that does, and where ([`fit()`]), by exhaustive search;
//! - [`chooser`]: the placement for one new vGPU ([`Chooser`]): the driver's lowest free id,
//!   or the one that takes the least room from larger types; and what the pick takes
//!   ([`Loss`]), by which `place` ranks GPUs in mixed-size mode.
//!
//! Everything here is pure: the caller reads the GPU and writes `vgpu-placement-id`.

use crate::model::pci::PciAddress;

pub mod chooser;
pub mod fit;
pub mod rule;
pub mod slots;

pub use chooser::{Chooser, Loss};
pub use fit::{Fit, fit};
pub use rule::{max_instances, supported_placements};
pub use slots::{Placed, SlotMap};

/// The most 1-GiB slots a region may have here (the largest known GPU has 94).
pub const MAX_REGION_SLOTS: u32 = 128;

/// The most vGPUs on one GPU in mixed-size mode.
pub const MAX_VGPUS_PER_GPU: usize = 32;

/// Why a placement question has no answer: input the rule does not cover, or a change the
/// slot map refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A region of no slots, or of more than [`MAX_REGION_SLOTS`].
    #[error("a placement region of {region} slots is not covered (1 to 128)")]
    Region {
        /// The region's slots.
        region: u32,
    },
    /// A placement size of 0 GiB, or larger than the region.
    #[error("a placement size of {size} GiB does not fit a region of {region} slots")]
    Size {
        /// The region's slots.
        region: u32,
        /// The type's placement size in GiB.
        size: u32,
    },
    /// The rule splits the region into equal parts, and this region does not split so.
    #[error("a region of {region} slots does not split into {parts} equal parts for {size} GiB")]
    Uneven {
        /// The region's slots.
        region: u32,
        /// The type's placement size in GiB.
        size: u32,
        /// The parts the rule asks for.
        parts: u32,
    },
    /// An id that is not among the size's supported ids.
    #[error("{id} is not a supported placement of a {size} GiB vGPU")]
    NotSupported {
        /// The placement id.
        id: u32,
        /// The placement size in GiB.
        size: u32,
    },
    /// The slots of a placement are held by a placed vGPU.
    #[error("a {size} GiB vGPU at {id} overlaps the vGPU at {other}")]
    Overlaps {
        /// The placement id asked for.
        id: u32,
        /// The placement size in GiB.
        size: u32,
        /// The placement id of the vGPU in the way.
        other: u32,
    },
    /// The GPU already holds [`MAX_VGPUS_PER_GPU`] vGPUs.
    #[error("the GPU already holds 32 vGPUs")]
    Full,
    /// A vGPU recorded where the map holds a slot free ([`SlotMap::hold`]).
    #[error("a {size} GiB vGPU at {id} would hold a free slot")]
    NotHeld {
        /// The placement id.
        id: u32,
        /// The placement size in GiB.
        size: u32,
    },
    /// No vGPU is placed at this id.
    #[error("no vGPU is placed at {id}")]
    NotPlaced {
        /// The placement id.
        id: u32,
    },
}

/// Why a placement cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementRefusal {
    /// A placement was asked on a GPU that is not in mixed-size mode.
    #[error("{gpu} is not in mixed-size mode ({now}): a placement applies in mixed-size mode only")]
    NotMixed {
        /// The GPU.
        gpu: PciAddress,
        /// Its mode, in words: `equal-size mode`, or why it is unknown.
        now: String,
    },
    /// The type cannot be created at the placement asked for.
    #[error("{type_label} cannot be created at placement {id} on {gpu} now (it can at: {})",
        if creatable.is_empty() { "none".to_owned() } else {
            creatable.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        })]
    NotCreatable {
        /// The GPU.
        gpu: PciAddress,
        /// The type, by name or id.
        type_label: String,
        /// The placement asked for.
        id: u32,
        /// Where the driver can create it now.
        creatable: Vec<u32>,
    },
    /// NVML did not list where the type can be created on a GPU in mixed-size mode. The
    /// driver's default could take a placement larger types need, so nothing is created; the
    /// room says the same ([`Limit::PlacementsUnknown`](crate::model::limit::Limit)).
    #[error(
        "{type_label} is not created on {gpu}: NVML does not say where the type can be placed \
         in mixed-size mode"
    )]
    Unknown {
        /// The GPU.
        gpu: PciAddress,
        /// The type, by name or id.
        type_label: String,
    },
}

/// The slots `[0, size)` as a mask; `size` is at most [`MAX_REGION_SLOTS`].
fn run(size: u32) -> u128 {
    if size >= 128 {
        u128::MAX
    } else {
        (1u128 << size) - 1
    }
}

/// How many bits `mask` has set, one step per bit: the masks here have few, and the
/// baseline x86-64 target has no population-count instruction.
fn count(mut mask: u128) -> u32 {
    let mut n = 0;
    while mask != 0 {
        mask &= mask - 1;
        n += 1;
    }
    n
}

/// The bits set in `mask`, lowest first.
fn bits(mut mask: u128) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let bit = mask.trailing_zeros();
        mask &= mask - 1;
        Some(bit)
    })
}
