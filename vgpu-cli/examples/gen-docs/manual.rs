//! What the man pages say beyond `--help`: the root page's DESCRIPTION, FILES and EXAMPLES,
//! the examples of the commands an operator reaches for first, and the pages to see also.
//! ENVIRONMENT and EXIT STATUS come from the command-line definition itself (`man.rs`).

/// The root page's DESCRIPTION: one paragraph each.
pub(crate) const DESCRIPTION: &[&str] = &[
    "vgpuctl manages vGPUs and SR-IOV virtual functions on a KVM host. \
     It covers NVIDIA, Intel and AMD GPUs in one model.",
    "It finds every GPU physical function in sysfs. \
     For each it reports the vendor, the driver, the NUMA node and the IOMMU group. \
     It also reports how the GPU offers vGPUs: mediated devices on the PF or on its VFs, \
     NVIDIA's vendor-specific VFIO on VFs, or plain SR-IOV VFs. \
     Each vGPU type is listed with its frame-buffer size and the room left on its GPU.",
    "It creates and destroys vGPUs and VFs. \
     With --define, a change is persistent: vgpuctl restore makes it again at boot. \
     Changes hold the host lock, so two vgpuctl never change one host at once. \
     A change that fails half-way is undone.",
    "vgpuctl never takes away a device a guest holds. \
     A vGPU whose VFIO device is open, or which a libvirt domain names, is refused \
     unless --force is given.",
    "It checks that the host is ready for device assignment: firmware tables, the IOMMU, \
     interrupt remapping, IOMMU-group isolation and VFIO.",
    "It gives vGPUs to libvirt domains (attach, detach, owners). \
     Installed as libvirt's QEMU hook (hook install), it prepares a domain's vGPUs before \
     the domain starts and releases them after it stops.",
    "plan, apply and assert bring a host to a desired state, written in vgpu-host.toml(5).",
    "The commands that talk to libvirt run in vgpuctl-libvirt, installed beside vgpuctl. \
     Every other command runs without libvirt's library.",
];

/// The root page's FILES: path, then what it holds. Paths are under --state-root.
pub(crate) const FILES: &[(&str, &str)] = &[
    (
        "/etc/vgpu/sriov/",
        "VF counts that restore sets at boot (sriov --define).",
    ),
    (
        "/etc/vgpu/vf-vgpus/",
        "vGPU types of vendor-VFIO VFs (create --define on such a GPU).",
    ),
    (
        "/etc/vgpu/bindings/",
        "Driver bindings that restore makes again (bind --define).",
    ),
    (
        "/etc/mdevctl.d/",
        "Mediated-device definitions, in mdevctl's own format, shared with mdevctl(8).",
    ),
    (
        "/etc/vgpu/hook.toml",
        "The libvirt hook's settings: the map from Nova flavors to types; vgpu-hook.toml(5).",
    ),
    (
        "/etc/vgpu/tenants.toml",
        "The tenant policy that attach, place, provision, the plans and the hook check; \
         vgpu-tenants.toml(5).",
    ),
    (
        "/etc/vgpu/usage.toml",
        "How long the usage ledger keeps raw intervals; vgpu-usage.toml(5).",
    ),
    (
        "/etc/libvirt/hooks/qemu.d/vgpu",
        "The hook script that hook install writes.",
    ),
    ("/run/vgpu/lock", "The host lock every change holds."),
    (
        "/var/lib/vgpu/offers/",
        "What each vendor-VFIO GPU offered, learned under each driver version.",
    ),
    (
        "/run/vgpu/hook/",
        "The devices the hook prepared for each domain.",
    ),
    (
        "/var/log/vgpu/audit.jsonl",
        "The audit log: one JSON line per change, with who asked and the outcome.",
    ),
    (
        "/var/lib/vgpu/usage/",
        "The usage ledger: vGPU time per tenant and domain.",
    ),
];

/// Examples: a line that says what, then the command.
pub(crate) type Example = (&'static str, &'static str);

/// The root page's EXAMPLES.
pub(crate) const EXAMPLES: &[Example] = &[
    ("List the GPUs, their VFs and vGPUs:", "vgpuctl list"),
    (
        "Check that the host is ready for device assignment:",
        "vgpuctl check",
    ),
    (
        "Create a 4 GiB vGPU on a Tesla T4, and make it again at boot:",
        "vgpuctl create 3b:00.0 --type T4-4Q --define",
    ),
    (
        "Give it to a libvirt domain:",
        "vgpuctl attach vm1 a7516c2d-8876-48af-990e-5e230a11aa54",
    ),
    (
        "Show what a desired-state file would change, then apply it:",
        "vgpuctl plan -f /etc/vgpu/host.toml\nvgpuctl apply -f /etc/vgpu/host.toml",
    ),
    (
        "Run against a simulated host (vgpu-sim) with its state elsewhere:",
        "vgpuctl --root /tmp/host --state-root /tmp/state list",
    ),
];

/// The examples of a subcommand's page, by page name.
pub(crate) fn examples(page: &str) -> &'static [Example] {
    match page {
        "vgpuctl-create" => &[
            (
                "A vGPU of a type, by its name without NVIDIA or GRID:",
                "vgpuctl create 3b:00.0 --type T4-4Q",
            ),
            (
                "A vGPU on a vendor-VFIO L40S, made again at boot; it prints the VF's address:",
                "vgpuctl create 5e:00.0 --type L40S-12Q --define",
            ),
        ],
        "vgpuctl-destroy" => &[(
            "Destroy a vGPU no domain holds:",
            "vgpuctl destroy a7516c2d-8876-48af-990e-5e230a11aa54",
        )],
        "vgpuctl-types" => &[(
            "The types of one GPU, with the room left for each:",
            "vgpuctl types 3b:00.0",
        )],
        "vgpuctl-sriov" => &[(
            "Enable 4 VFs, and again at boot:",
            "vgpuctl sriov 0001:03:00.0 --vfs 4 --define",
        )],
        "vgpuctl-attach" => &[(
            "Give a domain a new vGPU on a GPU, made again at boot:",
            "vgpuctl attach vm1 --gpu 3b:00.0 --type T4-4Q",
        )],
        "vgpuctl-plan" => &[(
            "What the config \"desktops\" would change:",
            "vgpuctl plan -f host.toml -c desktops",
        )],
        "vgpuctl-apply" => &[(
            "What apply would do, then do it:",
            "vgpuctl apply -f host.toml --dry-run\nvgpuctl apply -f host.toml",
        )],
        "vgpuctl-place" => &[(
            "Choose GPUs for ten 4 GiB vGPUs, spread over the GPUs of NUMA node 0:",
            "vgpuctl place --count 10 --framebuffer 4GiB --numa 0 --policy spread",
        )],
        "vgpuctl-hook-install" => &[(
            "Install the hook for the system libvirtd, then restart it:",
            "vgpuctl hook install\nsystemctl restart libvirtd",
        )],
        "vgpuctl-can-host" => &[(
            "Whether this host can take vm1, from the XML its source host gives:",
            "vgpuctl can-host -f vm1.xml",
        )],
        "vgpuctl-usage" => &[(
            "vGPU time per tenant over the last 30 days, as CSV:",
            "vgpuctl usage --since -30d --by tenant --csv",
        )],
        _ => &[],
    }
}

/// The pages every page sees also, after its parent's (name, section).
pub(crate) const SEE_ALSO: &[(&str, &str)] = &[
    ("vgpu-host.toml", "5"),
    ("vgpu-tenants.toml", "5"),
    ("mdevctl", "8"),
    ("virsh", "1"),
    ("nvidia-smi", "1"),
];
