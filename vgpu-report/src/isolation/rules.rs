//! The rules: which kinds of device a GPU can give, and what each provides on each dimension
//! given the GPU's facts.
//!
//! The rules follow what the hardware and drivers document: VFIO's isolation unit is the IOMMU
//! group, and without interrupt remapping a device can inject interrupts into the host
//! (`Documentation/driver-api/vfio.rst`); time-sliced vGPUs share one GPU's engines under the
//! vGPU scheduler's policy, MIG-backed vGPUs have their own compute and memory slices (NVIDIA
//! Virtual GPU Software User Guide, "Changing Scheduling Behavior for Time-Sliced vGPUs";
//! NVIDIA Multi-Instance GPU User Guide); the host can read a guest's data in use unless the
//! GPU runs in confidential-computing mode (NVIDIA Trusted Computing Solutions).

use crate::model::checks::Status as CheckStatus;
use crate::model::{Backend, Gpu};

use super::facts::{GpuFacts, Groups, Known};
use super::{Assessment, DeviceKind, Dimension, Fact, Status};

/// The kinds of device `gpu` can give a VM now: the whole GPU when nothing on it is in use and
/// its VFs are off; MIG-backed and time-sliced vGPUs when it offers types of that kind; plain
/// VFs when a plain SR-IOV GPU has VFs enabled.
pub(super) fn kinds(gpu: &Gpu) -> Vec<DeviceKind> {
    let mut kinds = Vec::new();
    let in_use = !gpu.vgpus.is_empty() || gpu.guest_vfs().next().is_some();
    if !in_use && gpu.vfs.is_empty() {
        kinds.push(DeviceKind::Passthrough);
    }
    let vgpus = matches!(
        gpu.backend,
        Backend::Mdev | Backend::VfMdev | Backend::NvidiaVfio
    );
    let offered = |kind: DeviceKind| {
        gpu.types
            .iter()
            .any(|t| DeviceKind::of_type(Some(t)) == kind)
    };
    for kind in [DeviceKind::MigVgpu, DeviceKind::TimeSlicedVgpu] {
        if vgpus && offered(kind) {
            kinds.push(kind);
        }
    }
    if gpu.backend == Backend::Sriov && !gpu.vfs.is_empty() {
        kinds.push(DeviceKind::PlainVf);
    }
    kinds
}

/// The worse of two statuses: not provided, then unknown, then partial, then provided.
pub(super) fn worse(a: Status, b: Status) -> Status {
    let rank = |s: Status| match s {
        Status::Provided => 0,
        Status::Partial => 1,
        Status::Unknown => 2,
        Status::NotProvided => 3,
    };
    if rank(b) > rank(a) { b } else { a }
}

fn of_check(known: &Known<CheckStatus>) -> Status {
    match known.value {
        Some(CheckStatus::Pass) => Status::Provided,
        Some(CheckStatus::Warn) => Status::Partial,
        Some(CheckStatus::Fail) => Status::NotProvided,
        None => Status::Unknown,
    }
}

fn of_groups(known: &Known<Groups>) -> Status {
    match known.value {
        Some(Groups::Isolated) => Status::Provided,
        Some(Groups::Shared) => Status::NotProvided,
        None => Status::Unknown,
    }
}

/// A status with its facts and the sentences of its residual risk.
struct Verdict {
    status: Status,
    facts: Vec<Fact>,
    risks: Vec<String>,
}

impl Verdict {
    fn new(status: Status) -> Self {
        Verdict {
            status,
            facts: Vec::new(),
            risks: Vec::new(),
        }
    }

    /// Adds a fact that does not change the status.
    fn with(mut self, fact: &Fact) -> Self {
        self.facts.push(fact.clone());
        self
    }

    /// Adds a fact whose level caps the status, and the risk to state when it does.
    fn capped(mut self, fact: &Fact, level: Status, risk: impl Into<String>) -> Self {
        self.facts.push(fact.clone());
        if level != Status::Provided {
            self.risks.push(risk.into());
        }
        self.status = worse(self.status, level);
        self
    }

    fn risk(mut self, risk: impl Into<String>) -> Self {
        self.risks.push(risk.into());
        self
    }

    fn into_assessment(self, dimension: Dimension) -> Assessment {
        Assessment {
            dimension,
            status: self.status,
            facts: self.facts,
            residual_risk: self.risks.join(" "),
        }
    }
}

fn detail(fact: &Fact) -> String {
    fact.detail.clone().unwrap_or_default()
}

/// DMA and interrupts confined by the IOMMU for the functions whose groups are `groups`.
fn confined(v: Verdict, f: &GpuFacts, groups: &Known<Groups>) -> Verdict {
    let iommu = &f.iommu_enabled;
    let remap = &f.interrupt_remapping;
    v.capped(
        &iommu.fact,
        of_check(iommu),
        format!(
            "The IOMMU is not confirmed active ({}): DMA is not confined to the guest's memory.",
            detail(&iommu.fact)
        ),
    )
    .capped(
        &remap.fact,
        of_check(remap),
        format!(
            "Interrupt remapping is not confirmed ({}): a guest can forge interrupts (MSI writes) to the host.",
            detail(&remap.fact)
        ),
    )
    .capped(
        &groups.fact,
        of_groups(groups),
        match groups.value {
            Some(Groups::Shared) if groups.fact.value.as_deref() == Some("none") => format!(
                "The device has no IOMMU group ({}): VFIO cannot confine its DMA.",
                detail(&groups.fact)
            ),
            Some(Groups::Shared) => format!(
                "The device is not isolated in its IOMMU group ({}): a guest given it can reach its neighbours by peer-to-peer DMA, and they it.",
                detail(&groups.fact)
            ),
            _ => format!("The IOMMU groups could not be checked ({}).", detail(&groups.fact)),
        },
    )
}

/// Confidential computing, the same for every kind.
fn cryptographic(f: &GpuFacts) -> Verdict {
    let cc = &f.confidential_computing;
    match cc.value {
        Some(true) => Verdict::new(Status::Provided).with(&cc.fact).risk(
            "The GPU runs in confidential-computing mode: the host cannot read the guest's GPU memory or its traffic over the bus; the guest must also run as a confidential VM (SEV-SNP, TDX) for its CPU-side data.",
        ),
        Some(false) => Verdict::new(Status::NotProvided).with(&cc.fact).risk(
            "The host administrator can read data in use: the GPU does not run in confidential-computing mode.",
        ),
        None => Verdict::new(Status::Unknown).with(&cc.fact).risk(
            "The host administrator can read data in use unless the GPU runs in confidential-computing mode, which could not be read.",
        ),
    }
}

fn in_use(f: &GpuFacts) -> usize {
    f.vgpus_in_use.value.unwrap_or_default()
}

/// What `kind` provides on `dimension`, from `f`.
pub(super) fn assess(kind: DeviceKind, dimension: Dimension, f: &GpuFacts) -> Assessment {
    let verdict = match kind {
        DeviceKind::Passthrough => passthrough(dimension, f),
        DeviceKind::TimeSlicedVgpu => time_sliced(dimension, f),
        DeviceKind::MigVgpu => mig(dimension, f),
        DeviceKind::PlainVf => plain_vf(dimension, f),
    };
    verdict.into_assessment(dimension)
}

fn passthrough(dimension: Dimension, f: &GpuFacts) -> Verdict {
    let alone = Verdict::new(Status::Provided)
        .with(&f.vgpus_in_use.fact)
        .with(&f.vfs_enabled.fact);
    match dimension {
        Dimension::Memory => confined(Verdict::new(Status::Provided), f, &f.pf_group).risk(
            "The GPU's memory keeps what a guest left in it until the GPU is reset or cleared before the next tenant.",
        ),
        Dimension::Compute => alone.risk("The whole GPU is the guest's; its vCPUs are scheduled by the host."),
        Dimension::Performance => alone.risk(
            "The GPU is the guest's alone; the PCIe link to its root port and the host's memory bandwidth are shared with other devices.",
        ),
        Dimension::Fault => {
            let remap = &f.interrupt_remapping;
            Verdict::new(Status::Provided)
                .capped(
                    &remap.fact,
                    of_check(remap),
                    "Without interrupt remapping a faulty or hostile guest can inject interrupts into the host.",
                )
                .capped(
                    &f.pf_group.fact,
                    of_groups(&f.pf_group),
                    format!(
                        "A fault or reset of the GPU reaches the devices of its IOMMU group ({}).",
                        detail(&f.pf_group.fact)
                    ),
                )
                .risk("A GPU that hangs may need a bus reset or the host rebooted to be given to the next tenant.")
        }
        Dimension::Administrative => Verdict::new(Status::Provided)
            .capped(&f.vfio.fact, of_check(&f.vfio), format!("VFIO is not ready ({}).", detail(&f.vfio.fact)))
            .risk(
                "The guest's driver manages the whole GPU and can change state the next tenant inherits (clocks, ECC mode, persistent settings) unless the GPU is reset between tenants.",
            ),
        Dimension::Cryptographic => cryptographic(f),
        Dimension::Economic => alone.risk("The whole GPU is attributable to the one domain it is given to."),
        Dimension::Operational => alone.risk(
            "A driver update or reset of this GPU concerns one tenant; the host's kernel and VFIO are shared by every guest.",
        ),
    }
}

fn scheduler_risk(policy: Option<&str>) -> &'static str {
    match policy {
        Some("fixed-share") => {
            "Each vGPU gets a fixed share of the GPU's time (by its type's maximum instances), busy or not."
        }
        Some("equal-share") => {
            "Each running vGPU gets an equal share of the GPU's time, which shrinks as more vGPUs start."
        }
        Some("best-effort") => {
            "A busy vGPU takes the time the others leave idle: no vGPU is guaranteed a share."
        }
        Some(_) => "The scheduler runs a policy this report does not know.",
        None => "The scheduler's policy could not be read.",
    }
}

fn time_sliced(dimension: Dimension, f: &GpuFacts) -> Verdict {
    let policy = f.scheduler.value.as_deref();
    let shared = format!(
        "Time-sliced vGPUs share one GPU: its engines run each vGPU's work in turn ({} vGPU(s) in use on it now).",
        in_use(f)
    );
    match dimension {
        Dimension::Memory => {
            let fb = &f.time_sliced_framebuffer;
            let on_pf = f.backend == Backend::Mdev;
            let base = if on_pf {
                Verdict::new(Status::Partial).with(&f.backend_fact).risk(
                    "vGPUs on the PF share one PCI function and IOMMU context: the host's vGPU manager and the GPU's MMU keep their frame buffers apart, not the IOMMU; a flaw in the host driver exposes every vGPU on the GPU.",
                )
            } else {
                Verdict::new(Status::Provided).with(&f.backend_fact)
            };
            let v = base.capped(
                &fb.fact,
                if fb.value.is_some() { Status::Provided } else { Status::Unknown },
                "The frame buffer of each type is not known.",
            );
            if on_pf {
                v
            } else {
                confined(v, f, &f.vf_groups)
                    .risk("Frame-buffer partitions are kept by the GPU and its host driver; the IOMMU confines each VF's DMA.")
            }
        }
        Dimension::Compute => {
            let level = match policy {
                Some("fixed-share" | "equal-share") => Status::Partial,
                Some(_) => Status::NotProvided,
                None => Status::Unknown,
            };
            Verdict::new(level)
                .with(&f.backend_fact)
                .with(&f.scheduler.fact)
                .risk(shared)
                .risk(scheduler_risk(policy))
        }
        Dimension::Performance => {
            let level = if policy == Some("fixed-share") { Status::Partial } else { Status::NotProvided };
            Verdict::new(level)
                .with(&f.backend_fact)
                .with(&f.vgpus_in_use.fact)
                .with(&f.scheduler.fact)
                .risk("Time-sliced vGPUs share one GPU's performance: memory bandwidth, caches and the switches between vGPUs are shared by all of them.")
                .risk(scheduler_risk(policy))
        }
        Dimension::Fault => {
            let ecc = match f.ecc.value {
                Some(true) => "ECC is on: memory errors are corrected or reported.",
                Some(false) => "ECC is off: memory errors go undetected.",
                None => "Whether ECC is on could not be read.",
            };
            Verdict::new(Status::NotProvided)
                .with(&f.backend_fact)
                .with(&f.vgpus_in_use.fact)
                .with(&f.ecc.fact)
                .risk("Time-sliced vGPUs share one GPU's faults: a hang, an uncorrectable error or a reset of the GPU stops every vGPU on it.")
                .risk(ecc)
        }
        Dimension::Administrative => Verdict::new(Status::Provided)
            .capped(
                &f.host_driver.fact,
                if f.host_driver.value.is_some() { Status::Provided } else { Status::Unknown },
                "No host driver is bound to manage the vGPUs.",
            )
            .risk("The host's driver alone configures the GPU; a guest sees only its vGPU."),
        Dimension::Cryptographic => cryptographic(f),
        Dimension::Economic => {
            let fb = &f.time_sliced_framebuffer;
            Verdict::new(Status::Partial)
                .capped(
                    &fb.fact,
                    if fb.value.is_some() { Status::Provided } else { Status::Unknown },
                    "The frame buffer of each type is not known.",
                )
                .with(&f.scheduler.fact)
                .risk("Frame buffer is attributable (fixed per type); compute time is shared, and NVML's per-vGPU utilisation is a sampled share of the GPU's time, not a measure of capacity used.")
        }
        Dimension::Operational => Verdict::new(Status::NotProvided)
            .with(&f.backend_fact)
            .with(&f.vgpus_in_use.fact)
            .risk("A driver update, a GPU reset, or a change of mode (scheduler, MIG, VF count) stops every vGPU on the GPU."),
    }
}

fn mig(dimension: Dimension, f: &GpuFacts) -> Verdict {
    let mode = &f.mig_mode;
    let mig_level = match mode.value {
        Some(true) => Status::Provided,
        Some(false) => Status::NotProvided,
        None => Status::Unknown,
    };
    let mig_risk = match mode.value {
        Some(false) => "MIG mode is off, so no GPU instance separates the vGPUs.",
        _ => "Whether MIG mode is on could not be read.",
    };
    let sliced = |v: Verdict| v.capped(&mode.fact, mig_level, mig_risk);
    match dimension {
        Dimension::Memory => {
            let fb = &f.mig_framebuffer;
            let v = sliced(Verdict::new(Status::Provided)).capped(
                &fb.fact,
                if fb.value.is_some() { Status::Provided } else { Status::Unknown },
                "The frame buffer of each type is not known.",
            );
            confined(v, f, &f.vf_groups).risk("Each GPU instance has its own memory slices and L2 cache.")
        }
        Dimension::Compute => sliced(Verdict::new(Status::Provided)).risk("Each GPU instance has its own streaming multiprocessors."),
        Dimension::Performance => sliced(Verdict::new(Status::Partial))
            .risk("GPU instances have their own SMs, memory slices and L2; the GPU's PCIe link and the host's memory bandwidth are shared by all of them."),
        Dimension::Fault => sliced(Verdict::new(Status::Partial)).with(&f.ecc.fact).risk(
            "MIG contains most errors to their GPU instance, but a fatal error or a reset of the whole GPU stops every instance.",
        ),
        Dimension::Administrative => Verdict::new(Status::Provided)
            .capped(
                &f.host_driver.fact,
                if f.host_driver.value.is_some() { Status::Provided } else { Status::Unknown },
                "No host driver is bound to manage the vGPUs.",
            )
            .risk("The host's driver alone creates GPU instances and vGPUs; a guest sees only its own."),
        Dimension::Cryptographic => cryptographic(f),
        Dimension::Economic => sliced(Verdict::new(Status::Provided))
            .with(&f.mig_framebuffer.fact)
            .risk("Compute and memory slices are fixed per GPU instance and attributable to the vGPU on it."),
        Dimension::Operational => Verdict::new(Status::NotProvided)
            .with(&mode.fact)
            .with(&f.vgpus_in_use.fact)
            .risk("Changing the GPU instances, a driver update or a GPU reset stops every vGPU on the GPU."),
    }
}

fn plain_vf(dimension: Dimension, f: &GpuFacts) -> Verdict {
    let quota = &f.vf_memory_quota;
    let quota_level = if quota.value.is_some() {
        Status::Provided
    } else {
        Status::Partial
    };
    let shared = format!(
        "VFs share the GPU's engines and memory bandwidth ({} VF(s) enabled).",
        f.vfs_enabled.value.unwrap_or_default()
    );
    match dimension {
        Dimension::Memory => confined(Verdict::new(Status::Provided), f, &f.vf_groups).capped(
            &quota.fact,
            quota_level,
            "The PF's driver partitions the GPU's memory between VFs, but no per-VF quota could be read.",
        ),
        Dimension::Compute => Verdict::new(Status::Unknown)
            .with(&f.backend_fact)
            .with(&f.vfs_enabled.fact)
            .risk(shared)
            .risk("The firmware time-slices the engines between VFs; the per-VF scheduling quota is not read."),
        Dimension::Performance => Verdict::new(Status::NotProvided).with(&f.vfs_enabled.fact).risk(shared),
        Dimension::Fault => {
            let v = confined(Verdict::new(Status::Partial), f, &f.vf_groups);
            v.risk("Each VF is reset on its own (FLR), but a hang or reset of the PF stops every VF.")
        }
        Dimension::Administrative => Verdict::new(Status::Provided)
            .capped(
                &f.host_driver.fact,
                if f.host_driver.value.is_some() { Status::Provided } else { Status::Unknown },
                "No driver is bound to the PF.",
            )
            .risk("The PF's driver on the host provisions the VFs; a guest sees only its VF."),
        Dimension::Cryptographic => cryptographic(f),
        Dimension::Economic => {
            let level = if quota.value.is_some() { Status::Partial } else { Status::Unknown };
            Verdict::new(level)
                .with(&quota.fact)
                .risk("A VF's memory quota is attributable; the engines' time is shared and not measured per VF.")
        }
        Dimension::Operational => Verdict::new(Status::NotProvided).with(&f.vfs_enabled.fact).risk(
            "Changing the VF count removes every VF first (sriov_numvfs); a PF driver update or reset stops all of them.",
        ),
    }
}
