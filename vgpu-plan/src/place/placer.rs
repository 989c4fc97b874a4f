//! [`Placer`]: placement for an orchestrator that places request after request on one host
//! or fleet. It keeps each GPU's slot (the type a request's size or type maps to, its room,
//! its vGPUs in use) per kind of request, and recounts only the GPUs a change touches. A
//! request then costs a pass over the cached slots, not a recount of every GPU.

use std::collections::HashMap;

use super::{
    Pick, PlaceRequest, PlaceWant, Policy, Slot, Tenancy, choose, is_candidate, not_offered,
    offers, slot,
};
use crate::HostState;
use crate::capacity::Ranker;
use crate::error::Result;
use crate::model::pci::PciAddress;

/// What [`slot`] found for one GPU, without the borrows: indices into the host's GPUs and
/// their types.
#[derive(Debug, Clone)]
struct Cached {
    gpu: usize,
    ty: Option<usize>,
    room: u32,
    in_use: u32,
    on_vfs: bool,
    framebuffer_mib: Option<u64>,
    mixed: Option<Ranker>,
}

/// One kind of request's index: each GPU's slot (`None`: it takes none), and how many GPUs
/// offer a requested type at all.
#[derive(Debug, Default)]
struct Index {
    slots: Vec<Option<Cached>>,
    offers: Vec<bool>,
    offering: usize,
}

/// Placement that keeps an index of each GPU's room by kind of request, updated by each
/// change ([`Placer::update`]). [`Placer::place`] answers exactly as [`super::place`] does
/// on the same host.
#[derive(Debug)]
pub struct Placer {
    host: HostState,
    by_address: HashMap<PciAddress, usize>,
    indexes: HashMap<(PlaceWant, Option<u32>), Index>,
}

impl Placer {
    /// A placer for `host`.
    pub fn new(host: HostState) -> Self {
        let by_address = host
            .inventory
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| (g.address, i))
            .collect();
        Self {
            host,
            by_address,
            indexes: HashMap::new(),
        }
    }

    /// The host as the placer sees it.
    pub fn host(&self) -> &HostState {
        &self.host
    }

    /// Changes the host with `change` (what was made on the GPUs `changed`), then recounts
    /// those GPUs' slots. Only the GPUs named are recounted: name every GPU the change
    /// touches. An address that is not one of the host's GPUs is ignored. A change to the GPU
    /// list, or to what every GPU's room depends on (definitions), needs a new placer.
    pub fn update(&mut self, changed: &[PciAddress], change: impl FnOnce(&mut HostState)) {
        change(&mut self.host);
        let gpus: Vec<usize> = changed
            .iter()
            .filter_map(|a| self.by_address.get(a).copied())
            .collect();
        for ((want, numa), index) in &mut self.indexes {
            for &i in &gpus {
                let gpu = &self.host.inventory.gpus[i];
                let offers = is_candidate(gpu, *numa) && offers(gpu, want);
                if offers != index.offers[i] {
                    index.offers[i] = offers;
                    if offers {
                        index.offering += 1;
                    } else {
                        index.offering -= 1;
                    }
                }
                index.slots[i] = cached(&self.host, i, *numa, want);
            }
        }
    }

    /// Chooses GPUs (and VFs) for `request` as [`super::place`] does on [`Placer::host`].
    /// Changes nothing: record what is made with [`Placer::update`].
    ///
    /// # Errors
    ///
    /// As [`super::place`].
    pub fn place(&mut self, request: &PlaceRequest, policy: Policy) -> Result<Vec<Pick>> {
        self.place_with(request, policy, None)
    }

    /// [`super::place_for_tenant`] on [`Placer::host`].
    ///
    /// # Errors
    ///
    /// As [`super::place_for_tenant`].
    pub fn place_for_tenant(
        &mut self,
        request: &PlaceRequest,
        policy: Policy,
        tenancy: &Tenancy,
    ) -> Result<Vec<Pick>> {
        self.place_with(request, policy, Some(tenancy))
    }

    fn place_with(
        &mut self,
        request: &PlaceRequest,
        policy: Policy,
        tenancy: Option<&Tenancy>,
    ) -> Result<Vec<Pick>> {
        let key = (request.want.clone(), request.numa_node);
        let host = &self.host;
        let index = self
            .indexes
            .entry(key)
            .or_insert_with(|| build(host, &request.want, request.numa_node));
        if let PlaceWant::Type(wanted) = &request.want {
            if index.offering == 0 {
                let candidates: Vec<_> = host
                    .inventory
                    .gpus
                    .iter()
                    .filter(|g| is_candidate(g, request.numa_node))
                    .collect();
                not_offered(&candidates, wanted)?;
            }
        }
        let gpus = &host.inventory.gpus;
        let slots: Vec<Slot<'_>> = index
            .slots
            .iter()
            .flatten()
            .map(|c| {
                let gpu = &gpus[c.gpu];
                Slot {
                    gpu,
                    ty: c.ty.map(|t| &gpu.types[t]),
                    room: c.room,
                    in_use: c.in_use,
                    on_vfs: c.on_vfs,
                    free_vfs: None,
                    framebuffer_mib: c.framebuffer_mib,
                    taken: 0,
                    mixed: c.mixed.clone(),
                }
            })
            .collect();
        choose(host, slots, request, policy, tenancy)
            .map_err(|err| super::with_reasons(host, request, err))
    }
}

/// The index of one kind of request over every GPU of `host`.
fn build(host: &HostState, want: &PlaceWant, numa: Option<u32>) -> Index {
    let gpus = &host.inventory.gpus;
    let offers: Vec<bool> = gpus
        .iter()
        .map(|g| is_candidate(g, numa) && offers(g, want))
        .collect();
    Index {
        slots: (0..gpus.len())
            .map(|i| cached(host, i, numa, want))
            .collect(),
        offering: offers.iter().filter(|o| **o).count(),
        offers,
    }
}

/// GPU `i`'s slot for `want`, when it is a candidate and can take any.
fn cached(host: &HostState, i: usize, numa: Option<u32>, want: &PlaceWant) -> Option<Cached> {
    let gpu = &host.inventory.gpus[i];
    if !is_candidate(gpu, numa) {
        return None;
    }
    let found = slot(host, gpu, want)?;
    Some(Cached {
        gpu: i,
        ty: found
            .ty
            .and_then(|t| gpu.types.iter().position(|u| std::ptr::eq(u, t))),
        room: found.room,
        in_use: found.in_use,
        on_vfs: found.on_vfs,
        framebuffer_mib: found.framebuffer_mib,
        mixed: found.mixed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::place::place;
    use crate::testing::fleet;

    /// Requests of every kind: sizes with and without rounding up, types by name and id, whole
    /// plain VFs, a type no GPU offers, on either NUMA node or any, for 1 to 3 vGPUs.
    fn requests() -> Vec<PlaceRequest> {
        let wants = [
            PlaceWant::Framebuffer {
                mib: 1024,
                series: 'Q',
                round_up: false,
            },
            PlaceWant::Framebuffer {
                mib: 4096,
                series: 'Q',
                round_up: false,
            },
            PlaceWant::Framebuffer {
                mib: 10240,
                series: 'Q',
                round_up: true,
            },
            PlaceWant::Framebuffer {
                mib: 24576,
                series: 'Q',
                round_up: false,
            },
            PlaceWant::Type("L40S-12Q".to_owned()),
            PlaceWant::Type("nvidia-231".to_owned()),
            PlaceWant::Type(crate::model::PLAIN_VF_TYPE.to_owned()),
            PlaceWant::Type("T4-9Q".to_owned()),
        ];
        (0..240u32)
            .map(|i| PlaceRequest {
                count: 1 + i % 3,
                want: wants[(i as usize * 7) % wants.len()].clone(),
                numa_node: [None, Some(0), Some(1)][(i % 3) as usize],
            })
            .collect()
    }

    /// Over a replay in which each request sees what the earlier ones made, the placer gives
    /// exactly what `place` gives on the same host: the same picks, the same errors.
    #[test]
    fn placer_answers_as_place_after_every_change() {
        for policy in [Policy::Pack, Policy::Spread] {
            let mut host = HostState {
                inventory: fleet::fleet(24),
                ..HostState::default()
            };
            let mut placer = Placer::new(host.clone());
            let mut satisfied = 0;
            for request in requests() {
                let scan = place(&host, &request, policy);
                let indexed = placer.place(&request, policy);
                match (&scan, &indexed) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{request:?}"),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    _ => panic!("{request:?}: {scan:?} but {indexed:?}"),
                }
                for pick in scan.iter().flatten() {
                    fleet::record(&mut host.inventory, pick);
                    placer.update(&[pick.gpu], |h| fleet::record(&mut h.inventory, pick));
                    satisfied += 1;
                }
            }
            assert!(satisfied > 100, "{satisfied}: the replay fills the fleet");
            assert_eq!(placer.host().inventory, host.inventory);
        }
    }

    #[test]
    fn placer_refuses_a_type_no_gpu_offers_as_place_does() {
        let host = HostState {
            inventory: fleet::fleet(4),
            ..HostState::default()
        };
        let request = PlaceRequest {
            count: 1,
            want: PlaceWant::Type("T4-9Q".to_owned()),
            numa_node: None,
        };

        let err = Placer::new(host.clone())
            .place(&request, Policy::Pack)
            .unwrap_err();

        assert!(matches!(err, Error::TypeNotOffered { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            place(&host, &request, Policy::Pack)
                .unwrap_err()
                .to_string()
        );
    }
}
