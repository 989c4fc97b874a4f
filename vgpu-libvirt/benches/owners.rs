//! Benchmark: who holds which vGPU, on libvirt's embedded QEMU driver holding 200 defined
//! domains that reference 256 vGPUs (224 mdevs, 16 NVIDIA vendor-VFIO VFs, 16 plain VFs; 8 more
//! mdevs are orphans), persistent definitions only.
//!
//! Measured, each in a process of its own (libvirt lets one process at a time hold an embedded
//! driver's root):
//!
//! - `Connection::owners` (the median of several runs, after one warm-up), and the process's
//!   peak RSS;
//! - the peer, the way operators answer the question today: `virsh -c <uri> list --all --name`,
//!   then `virsh -c <uri> dumpxml <domain>` for each domain, each a process of its own, the
//!   hostdevs read from each document; its time (median of fewer runs) and the peak RSS of the
//!   largest `virsh`; and, to tell the cost of a process per call from that of the calls, the
//!   same `dumpxml`s run by one `virsh` process.
//!
//! Both answers are checked to be the same. With `qemu:///embed`, every `virsh` loads the
//! driver and all 200 definitions itself; against `qemu:///system` it would ask a running
//! daemon instead, so the peer's cost here is higher than on a host with `libvirtd`.
//!
//! Every process runs on one CPU: libvirt's cache of QEMU's capabilities records the host's
//! CPUID, and on a virtual machine whose CPUs report different CPUID data a process started on
//! another CPU finds the cache outdated ("host cpuid changed") and probes QEMU again (seconds).
//!
//! Run: `cargo bench -p vgpu-libvirt --bench owners` (as root, with `virsh`:
//! `scripts/install-deps.sh`).

#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::resource::{UsageWho, getrusage};
use nix::unistd::Pid;
use uuid::Uuid;
use vgpu_core::model::{Backend, Gpu, Inventory, Vf, Vgpu, VgpuHandle, pci::PciAddress};
use vgpu_domain::{Hostdev, embedded_uri, xml};
use vgpu_libvirt::Connection;

const DOMAINS: usize = 200;
const MDEV_GPUS: usize = 8;
const MDEVS_PER_GPU: usize = 29; // 28 held, 1 orphan each
const VENDOR_VFS: usize = 16;
const PLAIN_VFS: usize = 16;
const HELD: usize = 256;
const OURS_RUNS: usize = 11;
const PEER_RUNS: usize = 3;

fn address(domain: u32, bus: u8, index: usize) -> PciAddress {
    // Functions 0..7 of devices 0..31: index 0 is bus:00.0.
    PciAddress::new(domain, bus, (index / 8) as u8, (index % 8) as u8).unwrap()
}

fn gpu(address: PciAddress, backend: Backend) -> Gpu {
    Gpu::new(address, backend)
}

fn vf(address: PciAddress, driver: &str) -> Vf {
    Vf {
        address,
        driver: Some(driver.to_owned()),
        iommu_group: None,
        vgpu_type: None,
        memory_mib: None,
    }
}

/// The simulated host: 8 mdev GPUs, an L40S with vendor-VFIO VFs, a Flex with plain VFs.
fn inventory() -> Inventory {
    let mut gpus = Vec::new();
    for g in 0..MDEV_GPUS {
        let pf = address(0, 0x10 + g as u8, 0);
        let mut t4 = gpu(pf, Backend::Mdev);
        t4.vgpus = (0..MDEVS_PER_GPU)
            .map(|m| Vgpu {
                placement: None,
                id: VgpuHandle::Mdev(Uuid::from_u128(((g as u128) << 32) | m as u128 | 1 << 100)),
                type_id: "nvidia-222".to_owned(),
                parent: pf,
            })
            .collect();
        gpus.push(t4);
    }
    let mut l40s = gpu(address(0, 0x41, 0), Backend::NvidiaVfio);
    for i in 0..VENDOR_VFS {
        let a = address(0, 0x41, 4 + i);
        l40s.vfs.push(vf(a, "nvidia"));
        l40s.vgpus.push(Vgpu {
            placement: None,
            id: VgpuHandle::Vf(a),
            type_id: "1145".to_owned(),
            parent: l40s.address,
        });
    }
    let mut flex = gpu(address(1, 0x03, 0), Backend::Sriov);
    flex.vfs = (0..PLAIN_VFS)
        .map(|i| vf(address(1, 0x03, 1 + i), "vfio-pci"))
        .collect();
    gpus.push(l40s);
    gpus.push(flex);
    Inventory {
        gpus,
        warnings: Vec::new(),
    }
}

/// The vGPUs the domains hold: every mdev but the last of each GPU, then every VF.
fn held(inventory: &Inventory) -> Vec<Hostdev> {
    let mut ids: Vec<VgpuHandle> = Vec::new();
    for gpu in &inventory.gpus {
        match gpu.backend {
            Backend::Mdev => ids.extend(gpu.vgpus.iter().take(MDEVS_PER_GPU - 1).map(|v| v.id)),
            _ => ids.extend(gpu.vfs.iter().map(|v| VgpuHandle::Vf(v.address))),
        }
    }
    assert_eq!(ids.len(), HELD);
    ids.into_iter()
        .map(|id| Hostdev::for_vgpu(inventory, id).unwrap())
        .collect()
}

fn domain_name(i: usize) -> String {
    format!("bench-{i:03}")
}

/// Phase `define`: 200 domains, domain i holding vGPU i and, for i < 56, vGPU 200 + i.
fn define(uri: &str) {
    let conn = Connection::open(uri).unwrap();
    let held = held(&inventory());
    for i in 0..DOMAINS {
        let mut devices = held[i].to_xml();
        if let Some(second) = held.get(DOMAINS + i) {
            devices.push_str(&second.to_xml());
        }
        conn.define(&format!(
            "<domain type='qemu'><name>{}</name><memory unit='MiB'>64</memory>\
             <os><type arch='x86_64' machine='pc'>hvm</type></os>\
             <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{devices}</devices></domain>",
            domain_name(i)
        ))
        .unwrap();
    }
}

/// The (domain, device) pairs of an answer, one per line: `pair <domain> <device>`.
fn print_pairs(pairs: &BTreeSet<(String, String)>) {
    for (domain, device) in pairs {
        println!("pair {domain} {device}");
    }
}

fn peak_rss_kib(who: UsageWho) -> i64 {
    getrusage(who).map(|u| u.max_rss()).unwrap_or(-1)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Phase `ours`: `Connection::owners`, timed.
fn ours(uri: &str) {
    let inventory = inventory();
    let started = Instant::now();
    let conn = Connection::open(uri).unwrap();
    println!("open_ms {:.1}", started.elapsed().as_secs_f64() * 1e3);
    let answer = conn.owners(&inventory).unwrap();
    let mut times = Vec::new();
    for _ in 0..OURS_RUNS {
        let started = Instant::now();
        let again = conn.owners(&inventory).unwrap();
        times.push(started.elapsed());
        assert_eq!(again, answer);
    }
    println!("median_ms {:.3}", median(times.clone()).as_secs_f64() * 1e3);
    println!(
        "min_ms {:.3}",
        times.iter().min().unwrap().as_secs_f64() * 1e3
    );
    println!("peak_rss_kib {}", peak_rss_kib(UsageWho::RUSAGE_SELF));
    let pairs: BTreeSet<(String, String)> = answer
        .vgpus
        .iter()
        .flat_map(|o| {
            o.holders
                .iter()
                .map(|h| (h.holder.domain.clone(), o.id.to_string()))
        })
        .collect();
    println!(
        "orphans {}",
        answer.vgpus.iter().filter(|o| o.holders.is_empty()).count()
    );
    print_pairs(&pairs);
}

fn virsh(uri: &str, args: &[&str]) -> String {
    let out = Command::new("virsh")
        .arg("-c")
        .arg(uri)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run virsh (package libvirt-clients): {e}"));
    assert!(
        out.status.success(),
        "virsh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Phase `peer`: `virsh list` and one `virsh dumpxml` per domain, timed.
fn peer(uri: &str) {
    let vgpus: BTreeSet<VgpuHandle> = inventory()
        .gpus
        .iter()
        .flat_map(|g| {
            g.vgpus
                .iter()
                .map(|v| v.id)
                .chain(g.vfs.iter().map(|v| VgpuHandle::Vf(v.address)))
        })
        .collect();
    let mut times = Vec::new();
    let mut answer = BTreeSet::new();
    for _ in 0..PEER_RUNS {
        let started = Instant::now();
        let mut pairs = BTreeSet::new();
        for name in virsh(uri, &["list", "--all", "--name"]).lines() {
            if name.is_empty() {
                continue;
            }
            let document = virsh(uri, &["dumpxml", name]);
            for hostdev in xml::hostdevs(&document).unwrap() {
                if vgpus.contains(&hostdev.device) {
                    pairs.insert((name.to_owned(), hostdev.device.to_string()));
                }
            }
        }
        times.push(started.elapsed());
        answer = pairs;
    }
    println!("median_ms {:.3}", median(times.clone()).as_secs_f64() * 1e3);
    println!(
        "min_ms {:.3}",
        times.iter().min().unwrap().as_secs_f64() * 1e3
    );
    println!("peak_rss_kib {}", peak_rss_kib(UsageWho::RUSAGE_CHILDREN));

    // The same calls from one virsh process: what the libvirt calls cost without a process
    // (and, with the embedded driver, a driver start) for each.
    let mut batched = Vec::new();
    for _ in 0..PEER_RUNS {
        let started = Instant::now();
        let names: Vec<String> = virsh(uri, &["list", "--all", "--name"])
            .lines()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        let script: Vec<String> = names.iter().map(|n| format!("dumpxml {n}")).collect();
        let output = virsh(uri, &[&script.join("; ")]);
        let mut pairs = BTreeSet::new();
        for (name, document) in names.iter().zip(output.split_inclusive("</domain>")) {
            for hostdev in xml::hostdevs(document.trim_start()).unwrap() {
                if vgpus.contains(&hostdev.device) {
                    pairs.insert((name.clone(), hostdev.device.to_string()));
                }
            }
        }
        batched.push(started.elapsed());
        assert_eq!(pairs, answer, "virsh batched gave another answer");
    }
    println!(
        "batched_median_ms {:.3}",
        median(batched).as_secs_f64() * 1e3
    );
    print_pairs(&answer);
}

/// What a phase printed: its `key value` lines and its pairs.
struct Report {
    values: Vec<(String, String)>,
    pairs: BTreeSet<(String, String)>,
}

impl Report {
    fn value(&self, key: &str) -> f64 {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

fn phase(name: &str, root: &Path) -> Report {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--phase", name])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "phase {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut report = Report {
        values: Vec::new(),
        pairs: BTreeSet::new(),
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some("pair"), Some(domain), Some(device)) => {
                report.pairs.insert((domain.to_owned(), device.to_owned()));
            }
            (Some(key), Some(value), None) => {
                report.values.push((key.to_owned(), value.to_owned()));
            }
            _ => {}
        }
    }
    report
}

/// Keeps this process, and so every process it starts, on the first CPU it may use.
fn pin_to_one_cpu() -> Option<usize> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
    let cpu = (0..CpuSet::count()).find(|&c| allowed.is_set(c).unwrap_or(false))?;
    let mut one = CpuSet::new();
    one.set(cpu).ok()?;
    sched_setaffinity(Pid::from_raw(0), &one).ok()?;
    Some(cpu)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, name, root] = args.as_slice() {
        if flag == "--phase" {
            let uri = embedded_uri(Path::new(root));
            match name.as_str() {
                "define" => define(&uri),
                "ours" => ours(&uri),
                "peer" => peer(&uri),
                other => panic!("no phase {other}"),
            }
            return ExitCode::SUCCESS;
        }
    }
    if Command::new("virsh").arg("--version").output().is_err() {
        eprintln!(
            "owners benchmark: virsh is missing (package libvirt-clients; scripts/install-deps.sh)"
        );
        return ExitCode::FAILURE;
    }
    match pin_to_one_cpu() {
        Some(cpu) => println!("pinned to CPU {cpu}"),
        None => println!("not pinned to one CPU: QEMU may be probed again at any start"),
    }
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-owners");
    if root.exists() {
        std::fs::remove_dir_all(&root).unwrap();
    }
    std::fs::create_dir_all(&root).unwrap();

    let started = Instant::now();
    phase("define", &root);
    println!(
        "defined {DOMAINS} domains holding {HELD} vGPUs (config only) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let ours = phase("ours", &root);
    let peer = phase("peer", &root);
    assert_eq!(ours.pairs, peer.pairs, "the two answers differ");
    assert_eq!(ours.pairs.len(), HELD);

    let (ours_ms, peer_ms) = (ours.value("median_ms"), peer.value("median_ms"));
    println!(
        "Connection::owners: median {ours_ms:.2} ms (min {:.2} ms) of {OURS_RUNS} runs; \
         peak RSS {} KiB (this process, with the embedded driver; opening it took {:.0} ms); \
         {} orphans",
        ours.value("min_ms"),
        ours.value("peak_rss_kib"),
        ours.value("open_ms"),
        ours.value("orphans")
    );
    println!(
        "virsh list + {DOMAINS} x dumpxml: median {peer_ms:.0} ms (min {:.0} ms) of {PEER_RUNS} runs; \
         peak RSS {} KiB (largest virsh)",
        peer.value("min_ms"),
        peer.value("peak_rss_kib")
    );
    let batched_ms = peer.value("batched_median_ms");
    println!(
        "virsh list + one virsh running {DOMAINS} dumpxml: median {batched_ms:.0} ms of {PEER_RUNS} runs"
    );
    println!(
        "same answer ({} holdings); virsh per domain takes {:.0}x as long, one batched virsh {:.0}x",
        ours.pairs.len(),
        peer_ms / ours_ms,
        batched_ms / ours_ms
    );
    ExitCode::SUCCESS
}
