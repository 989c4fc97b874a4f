//! NVIDIA's migration verdict between two simulated `mixed` hosts, each with the test NVML.
//! The source prints a vGPU's metadata (`vgpuctl migration-metadata`). The destination's
//! `can-host --metadata` asks NVML about it under the rule the destination's data states
//! (`[migration]` of the test NVML's data).

use std::process::Output;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::common::mixed::{command, fake_nvml, libvirt_uri, mixed};
use crate::common::{self, T4, UUID, json, mdev_domain, stderr};
use vgpu_testing::fake_nvml::FakeNvml;

/// The UUID of the domain `web-1` (libvirt-mixed.xml), which holds `UUID` on the source.
const WEB_1: &str = "6c1d2a5e-1111-4b7a-9c3d-000000000001";

/// `web-1` as it arrives, with the mediated device `uuid` whose type `attach` recorded.
fn web_1(uuid: &str) -> String {
    mdev_domain(1, uuid, "GRID T4-2Q").replace("00000000-0000-4000-8000-000000000001", WEB_1)
}

/// The L40S VF that the Nova domain `server-7` holds on the source.
const L40S_VF: &str = "0000:5e:00.4";

/// The destination's NVML: its T4 with ECC `ecc`, the driver `driver`, and `migration` as
/// the `[migration]` table.
fn destination_data(driver: &str, device_id: &str, ecc: bool, migration: &str) -> String {
    format!(
        "driver_version = \"{driver}\"\n{migration}\n[[gpu]]\npci = \"0000:3b:00.0\"\n\
         name = \"Tesla T4\"\nuuid = \"GPU-2b2b3c4d-0000-4000-8000-00000000003b\"\n\
         pci_device_id = {device_id}\nhost_vgpu_mode = \"non-sriov\"\n\
         ecc = {{ current = {ecc}, pending = {ecc} }}\n\
         [[gpu.type]]\nid = 231\nname = \"GRID T4-2Q\"\nclass = \"Quadro\"\n\
         framebuffer_mib = 2048\nmax_instances = 8\n"
    )
}

fn run(h: &common::Host, uri: &str, nvml: Option<&FakeNvml>, args: &[&str]) -> Output {
    command(h, uri, nvml, args).output().unwrap()
}

#[test]
fn source_metadata_names_the_vgpu_by_mdev_uuid_or_by_its_domain_and_says_why_not() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(
        &h,
        &libvirt_uri(),
        Some(&nvml),
        &["migration-metadata", UUID, L40S_VF],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut doc = json(&out);
    let buffers: Vec<Value> = doc["vgpus"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .map(|v| v["nvml"].take())
        .collect();
    assert_eq!(
        doc,
        json!({"format": "vgpu-migration-metadata/1", "vgpus": [
            {"vgpu": UUID, "gpu": "0000:3b:00.0", "domain": WEB_1, "instance": 1, "type_id": 231,
             "type_name": "GRID T4-2Q", "ecc": true, "host_driver": "550.90.05",
             "guest_driver": "550.90.07", "nvml": null},
            {"vgpu": L40S_VF, "gpu": "0000:5e:00.0",
             "domain": "6c1d2a5e-1111-4b7a-9c3d-000000000002", "instance": 2, "type_id": 1153,
             "type_name": "NVIDIA L40S-12Q", "ecc": false, "host_driver": "550.90.05",
             "guest_driver": null, "nvml": null},
        ]})
    );
    // The type's name is the one `list` shows for that vGPU.
    let list = common::list(&h);
    for v in doc["vgpus"].as_array().unwrap() {
        let gpu = common::gpu(&list, v["gpu"].as_str().unwrap());
        let (_, type_id) = common::vgpu_types(gpu)
            .into_iter()
            .find(|(id, _)| *id == v["vgpu"])
            .unwrap();
        let listed = gpu["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == type_id);
        assert_eq!(listed.map(|t| &t["name"]), Some(&v["type_name"]));
    }
    // Each buffer is NVML's whole: the structure (`nvmlVgpuMetadata_t`, 212 bytes) with the
    // host driver at byte 92, then the opaque section past its declared 4 bytes, at 208.
    let decoded: Vec<Vec<u8>> = buffers
        .iter()
        .map(|b| STANDARD.decode(b.as_str().unwrap()).unwrap())
        .collect();
    let parts = |b: &Vec<u8>| {
        (
            b.len(),
            String::from_utf8_lossy(&b[92..101]).into_owned(),
            String::from_utf8_lossy(&b[208..]).into_owned(),
        )
    };
    assert_eq!(
        decoded.iter().map(parts).collect::<Vec<_>>(),
        [
            (
                254,
                "550.90.05".to_owned(),
                "vgpu-nvml-fake vgpu type=231 device=0x1eb810de".to_owned()
            ),
            (
                255,
                "550.90.05".to_owned(),
                "vgpu-nvml-fake vgpu type=1153 device=0x26b910de".to_owned()
            ),
        ]
    );

    // Without libvirt, NVML's vGPUs name the VF only by a VM nobody names; libvirt's silence
    // is said.
    let absent = format!("test://{}", h.state.path().join("absent.xml").display());
    let out = run(&h, &absent, Some(&nvml), &["migration-metadata", L40S_VF]);
    let text = stderr(&out);
    assert!(
        out.status.code() == Some(1)
            && text.starts_with(&format!("vgpuctl: error: libvirt at {absent} did not answer ("))
            && text.ends_with(&format!(
                "), so no domain is known to hold a vGPU: {L40S_VF} on 0000:5e:00.0: NVML runs no \
                 vGPU that is it: NVML names a VF's vGPU only by its VM and type, and libvirt names \
                 no domain that holds it\n"
            )),
        "{text}"
    );
    // A Flex VF is not NVIDIA's; no NVML, no metadata.
    let out = run(
        &h,
        &libvirt_uri(),
        Some(&nvml),
        &["migration-metadata", "0001:03:00.1"],
    );
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "vgpuctl: error: 0001:03:00.0 is not an NVIDIA GPU: migration metadata applies to NVIDIA \
             GPUs only\n"
                .to_owned()
        )
    );
    let out = run(&h, &libvirt_uri(), None, &["migration-metadata", UUID]);
    let text = stderr(&out);
    assert!(
        out.status.code() == Some(1)
            && text.starts_with(
                "vgpuctl: error: NVML is needed to read a vGPU's migration metadata, but it is not loaded: "
            ),
        "{text}"
    );
    // What names no vGPU here, and NVML refusing the metadata, are errors naming them.
    let dev = h.sim.root().join("sys/bus/pci/devices");
    let unknown = "6f2b1c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let refusing = FakeNvml::new(&format!(
        "functions = {{ nvmlVgpuInstanceGetMetadata = \"not-supported\" }}\n{}",
        std::fs::read_to_string(nvml.data_path()).unwrap()
    ))
    .unwrap();
    // Two vGPUs of the type in server-7, which holds one VF: NVML cannot say which is the VF.
    let twice = FakeNvml::new(&format!(
        "{}\n[[gpu.vgpu]]\ninstance = 5\ntype_id = 1153\nuuid = \"{unknown}\"\n\
         vm_id = {{ kind = \"uuid\", id = \"6c1d2a5e-1111-4b7a-9c3d-000000000002\" }}\n",
        std::fs::read_to_string(nvml.data_path()).unwrap()
    ))
    .unwrap();
    for (nvml, vgpu, why) in [
        (
            &nvml,
            "gpu7",
            "\"gpu7\" is not a vGPU id (a mediated device UUID or a VF's PCI address)\n".to_owned(),
        ),
        (
            &nvml,
            unknown,
            format!("no vGPU matches {unknown:?} under {}\n", dev.display()),
        ),
        (
            &twice,
            L40S_VF,
            format!(
                "{L40S_VF} on 0000:5e:00.0: NVML runs no vGPU that is it: NVML runs 2 vGPU(s) of \
                 its type in domain server-7 (6c1d2a5e-1111-4b7a-9c3d-000000000002) and names \
                 none by its VF, so which one it is cannot be told\n"
            ),
        ),
        (
            &refusing,
            UUID,
            "0000:3b:00.0: nvmlVgpuInstanceGetMetadata: not supported by this GPU or its mode \
             (NVML_ERROR_NOT_SUPPORTED)\n"
                .to_owned(),
        ),
    ] {
        let out = run(
            &h,
            &libvirt_uri(),
            Some(nvml),
            &["migration-metadata", vgpu],
        );
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (Some(1), format!("vgpuctl: error: {why}"))
        );
    }
}

#[test]
fn destination_takes_nvml_s_verdict_and_refuses_each_limit_and_mismatch_by_name() {
    let source = mixed();
    let nvml = fake_nvml();
    let out = run(
        &source,
        &libvirt_uri(),
        Some(&nvml),
        &["migration-metadata", UUID],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let metadata = dir.path().join("web-1.json");
    std::fs::write(&metadata, &out.stdout).unwrap();
    let out_of_source = out.stdout;
    let domain = dir.path().join("web-1.xml");
    std::fs::write(&domain, web_1(UUID)).unwrap();

    // The destination holds the source's mdev UUID already: the vGPU would get a new one.
    let dest = common::host("mixed");
    let held = common::vgpuctl(&dest, &["create", T4, "--type", "T4-2Q", "--uuid", UUID]);
    assert_eq!(held.status.code(), Some(0), "{}", stderr(&held));
    let taken = "[migration]\nhost_drivers = [\"550.90.05\", \"550.127.05\"]\n";
    let dest_nvml =
        FakeNvml::new(&destination_data("550.127.05", "0x1eb810de", true, taken)).unwrap();
    let can_host = |extra: &[&str]| {
        let mut args = vec![
            "can-host",
            "-f",
            domain.to_str().unwrap(),
            "--metadata",
            metadata.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&dest, &libvirt_uri(), Some(&dest_nvml), &args)
    };
    let out = can_host(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut report = json(&out);
    let to = report["migration"][0]["to"].take();
    assert_eq!(report["devices"][0]["to"], to);
    assert!(
        to.as_str().is_some_and(|t| t.len() == 36 && t != UUID),
        "{to}"
    );
    assert_eq!(
        report["migration"],
        json!([{
            "from": UUID, "to": null, "gpu": "0000:3b:00.0",
            "type_id": {"source": 231, "here": 231},
            "ecc": {"source": true, "here": true},
            "host_driver": {"source": "550.90.05", "here": "550.127.05"},
            "guest_driver": "550.90.07",
            "nvml": {"value": {"moves": ["cold", "live"], "limits": []}},
            "refusals": [],
        }])
    );

    // Each limit of the destination's rule, and ECC, refused by name; nothing is made.
    let refused = |data: String, why: &str| {
        dest_nvml.set_data(&data).unwrap();
        let out = can_host(&[]);
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (
                Some(1),
                format!("vgpuctl: error: vm1 cannot move here live: {UUID}: {why}\n")
            ),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = refused(
        destination_data("550.127.05", "0x1eb810de", true, ""),
        "NVML does not allow a live move: limited by the host driver",
    );
    assert!(
        table.contains(&format!(
            "{UUID}  limited by the host driver  231      on   550.90.05 -> 550.127.05"
        )) && table.ends_with("vm1: cannot move here live (1 of 1 vGPU(s) checked refused)\n"),
        "{table}"
    );
    refused(
        destination_data(
            "550.90.05",
            "0x1eb810de",
            true,
            "[migration]\nguest_drivers = [\"535.183.01\"]\n",
        ),
        "NVML does not allow a live move: limited by the guest driver",
    );
    refused(
        destination_data("550.90.05", "0x20b510de", true, ""),
        "NVML does not allow a live move: limited by the GPU",
    );
    refused(
        destination_data("550.90.05", "0x1eb810de", false, ""),
        "ECC is on at the source and off here",
    );

    assert_eq!(common::vgpu_ids(&dest, T4), [UUID], "can-host made nothing");

    // Metadata that does not go with the domain is refused before NVML is asked.
    let doc: Value = serde_json::from_slice(&out_of_source).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut doc = doc.clone();
        f(&mut doc);
        doc.to_string()
    };
    let other = "9a3e5c71-2b4d-4f60-8e1a-3c5b7d9f0a21";
    let cases = [
        (
            web_1(other),
            doc.to_string(),
            format!(
                "it names vGPU {UUID}, which is not one of the vGPUs this host would make for the domain"
            ),
        ),
        (
            mdev_domain(1, UUID, "GRID T4-2Q"),
            doc.to_string(),
            format!(
                "vGPU {UUID} is of domain {WEB_1} there, not of 00000000-0000-4000-8000-000000000001"
            ),
        ),
        (
            web_1(UUID),
            with(&|d| {
                let first = d["vgpus"][0].clone();
                d["vgpus"].as_array_mut().unwrap().push(first);
            }),
            format!("it names vGPU {UUID} twice"),
        ),
        (
            web_1(UUID),
            with(&|d| d["vgpus"][0]["nvml"] = json!("AQID")),
            format!("the NVML buffer of vGPU {UUID} (3 bytes) is not whole vGPU metadata"),
        ),
        (
            web_1(UUID),
            with(&|d| d["vgpus"][0]["host_driver"] = json!("535.183.01")),
            format!(
                "vGPU {UUID} is said to run under host driver 535.183.01, its NVML buffer says 550.90.05"
            ),
        ),
        (
            web_1(UUID),
            with(&|d| d["vgpus"] = json!([])),
            format!(
                "it leaves out vGPU {UUID}, which would be an NVIDIA vGPU on 0000:3b:00.0 here"
            ),
        ),
        (
            web_1(UUID),
            with(&|d| d["format"] = json!("other/2")),
            "format \"other/2\", not \"vgpu-migration-metadata/1\"".to_owned(),
        ),
    ];
    for (xml, meta, why) in cases {
        std::fs::write(&domain, xml).unwrap();
        std::fs::write(&metadata, meta).unwrap();
        let out = can_host(&[]);
        assert_eq!(
            (out.status.code(), stderr(&out)),
            (
                Some(1),
                format!("vgpuctl: error: migration metadata: {why}\n")
            )
        );
    }

    // NVML that cannot judge refuses the vGPU by name; so does a host without NVML.
    std::fs::write(&domain, web_1(UUID)).unwrap();
    std::fs::write(&metadata, doc.to_string()).unwrap();
    dest_nvml
        .set_data(&format!(
            "functions = {{ nvmlGetVgpuCompatibility = \"missing\" }}\n{}",
            destination_data("550.90.05", "0x1eb810de", true, "")
        ))
        .unwrap();
    let out = can_host(&[]);
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            format!(
                "vgpuctl: error: vm1 cannot move here live: {UUID}: NVML cannot judge it: \
                 nvmlGetVgpuCompatibility: this driver does not implement it \
                 (NVML_ERROR_FUNCTION_NOT_FOUND; an older driver)\n"
            )
        )
    );
    let out = run(
        &dest,
        &libvirt_uri(),
        None,
        &[
            "can-host",
            "-f",
            domain.to_str().unwrap(),
            "--metadata",
            metadata.to_str().unwrap(),
        ],
    );
    let text = stderr(&out);
    assert!(
        out.status.code() == Some(1)
            && text.starts_with(&format!(
                "vgpuctl: error: vm1 cannot move here live: {UUID}: NVML cannot judge it: NVML is \
                 not loaded: "
            )),
        "{text}"
    );
    std::fs::write(&metadata, "{\"format\": ").unwrap();
    let out = can_host(&[]);
    let text = stderr(&out);
    assert!(
        out.status.code() == Some(1)
            && text.starts_with(&format!(
                "vgpuctl: error: {} is not migration metadata (`vgpuctl migration-metadata` prints it)",
                metadata.display()
            )),
        "{text}"
    );
}
