//! The man-page generator of `examples/gen-docs`: `vgpuctl.8`, one page per subcommand, each
//! with its own options.

#[path = "../../examples/gen-docs/man.rs"]
mod man;

use std::path::Path;

fn pages() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let written = man::write_man_pages(dir.path()).expect("pages written");
    let names = written
        .iter()
        .map(|p| {
            p.file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    (dir, names)
}

fn page(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).expect("page readable")
}

#[test]
fn man_pages_are_the_root_then_one_per_subcommand() {
    let (_dir, names) = pages();

    assert_eq!(
        names,
        [
            "vgpuctl.8",
            "vgpuctl-list.8",
            "vgpuctl-types.8",
            "vgpuctl-check.8",
            "vgpuctl-tenants.8",
            "vgpuctl-sriov.8",
            "vgpuctl-create.8",
            "vgpuctl-destroy.8",
            "vgpuctl-define.8",
            "vgpuctl-undefine.8",
            "vgpuctl-start.8",
            "vgpuctl-stop.8",
            "vgpuctl-bind.8",
            "vgpuctl-unbind.8",
            "vgpuctl-restore.8",
            "vgpuctl-provision.8",
            "vgpuctl-watch.8",
            "vgpuctl-attach.8",
            "vgpuctl-detach.8",
            "vgpuctl-owners.8",
            "vgpuctl-plan.8",
            "vgpuctl-apply.8",
            "vgpuctl-assert.8",
            "vgpuctl-place.8",
            "vgpuctl-sched.8",
            "vgpuctl-nova-config.8",
            "vgpuctl-top.8",
            "vgpuctl-metrics.8",
            "vgpuctl-isolation.8",
            "vgpuctl-usage.8",
            "vgpuctl-hook.8",
            "vgpuctl-hook-qemu.8",
            "vgpuctl-hook-install.8",
            "vgpuctl-hook-uninstall.8",
            "vgpuctl-completions.8",
        ]
    );
}

#[test]
fn man_pages_files_are_the_pages_written() {
    let (dir, names) = pages();

    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .expect("readable")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut sorted = names;
    sorted.sort();

    assert_eq!(files, sorted);
}

#[test]
fn man_page_root_is_section_8_listing_subcommand_pages() {
    let (dir, _names) = pages();

    let root = page(dir.path(), "vgpuctl.8");

    assert!(root.starts_with(&format!(
        ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH vgpuctl 8  \"vgpuctl {}\" \"System Administration\"\n",
        env!("CARGO_PKG_VERSION")
    )));
    assert_eq!(root.matches(".ds Aq").count(), 2);
    assert!(root.contains("vgpuctl\\-create(8)"));
    assert!(root.contains("vgpuctl\\-hook(8)"));
}

#[test]
fn man_page_create_has_its_own_options() {
    let (dir, _names) = pages();

    let create = page(dir.path(), "vgpuctl-create.8");

    assert!(create.contains(".TH vgpuctl-create 8 "));
    assert!(create.contains("\\fB\\-\\-type\\fR \\fI<TYPE>\\fR"));
    assert!(create.contains("\\fB\\-\\-uuid\\fR \\fI<UUID>\\fR"));
    assert!(create.contains("\n\\fB\\-\\-define\\fR\n"));
    assert!(create.contains("\n\\fB\\-\\-auto\\fR\n"));
}

#[test]
fn man_page_create_lacks_other_subcommands_options() {
    let (dir, _names) = pages();

    let create = page(dir.path(), "vgpuctl-create.8");

    assert!(!create.contains("\\-\\-vfs"));
    assert!(!create.contains("\\-\\-guest\\-address"));
}

#[test]
fn man_page_sriov_has_its_own_options() {
    let (dir, _names) = pages();

    let sriov = page(dir.path(), "vgpuctl-sriov.8");

    assert!(sriov.contains("\\fB\\-\\-vfs\\fR \\fI<VFS>\\fR"));
    assert!(sriov.contains("\\fB\\-\\-autoprobe\\fR \\fI<AUTOPROBE>\\fR"));
    assert!(!sriov.contains("\\-\\-uuid"));
}

#[test]
fn man_page_hook_install_names_its_parent_page() {
    let (dir, _names) = pages();

    let install = page(dir.path(), "vgpuctl-hook-install.8");

    assert!(install.contains("\\fB\\-\\-dir\\fR \\fI<DIR>\\fR"));
    assert!(install.contains(".SH \"SEE ALSO\"\n\\fBvgpuctl\\-hook\\fR(8)"));
}

#[test]
fn man_page_stop_has_the_exit_status() {
    let (dir, _names) = pages();

    let stop = page(dir.path(), "vgpuctl-stop.8");

    assert!(stop.contains(".SH \"EXIT STATUS\"\nExit codes: 0 success, 1 error, 2 usage"));
}
