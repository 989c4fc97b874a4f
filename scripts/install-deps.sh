#!/usr/bin/env bash
# Installs the Debian packages that building and testing vgpu need, only those missing.
# With --fuzz, instead, what the fuzz targets of fuzz/ need on top of that: g++ (libfuzzer-sys
# compiles libFuzzer) and cargo-fuzz (`cargo install --locked`, skipped when that version is
# installed).
set -euo pipefail

fuzz=false
case "${1:-}" in
  --fuzz) fuzz=true ;;
  "") ;;
  *) echo "usage: $0 [--fuzz]" >&2; exit 2 ;;
esac
CARGO_FUZZ_VERSION=0.13.2

packages=(
  pkg-config   # -sys crates find their C libraries
  fuse3        # fusermount3 and /dev/fuse setup for the vgpu-sim host simulator
  mdevctl      # the peer the simulator and lifecycle tests interoperate with
  util-linux   # unshare, mount, mountpoint for running peers against a simulated host
  procps       # ps, for the demo and process tests
  strace       # system-call counts of vgpuctl and mdevctl in the discovery benchmark
  libvirt-dev                 # the virt crate links libvirt
  libvirt-daemon-driver-qemu  # qemu:///embed: libvirt's QEMU driver in-process, no daemon
  qemu-system-x86             # the emulator the QEMU driver probes and starts
  libvirt-clients             # virsh, the peer the vgpu-libvirt benchmark measures against, and virt-xml-validate
  libxml2-utils               # xmllint, which virt-xml-validate runs on the domain XML the hook rewrites
  libvirt-daemon              # /usr/sbin/libvirtd, which the hook test starts with hooks in a temporary directory, and its node-device driver, which vgpu-sim's libvirt_nodedev test runs on the simulator
  python3                     # scripts/layering.py, which make lint runs
  python3-nova                # Nova's own parsers (nova.pci.devspec), which check `vgpuctl nova-config`
  python3-jsonschema          # KubeVirt's OpenAPI definitions, which check `vgpuctl kubevirt-config` and the YAML of docs and contrib
  python3-yaml                # the YAML those checks read
  libudev-dev                 # the udev crate links libudev (uevent monitors)
  udev                        # systemd-udevd and udevadm, which the uevent and udev-rule tests run
  make                        # make install, which the install test runs
  tmux                        # a pseudo-terminal the `vgpuctl top` test drives and reads
  debhelper                   # dh, which debian/rules runs (scripts/package-test.sh builds the package)
  dpkg-dev                    # dpkg-buildpackage, dpkg-shlibdeps (the package's library dependencies)
  man-db                      # man -w, which finds the packaged man pages, and man --warnings, which checks them
  mandoc                      # mandoc -Tlint, which checks the man pages
  prometheus                  # promtool, which checks what `vgpuctl metrics` exposes
)
if $fuzz; then
  packages=(g++)  # libfuzzer-sys builds libFuzzer's C++ sources
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# libvirt's QEMU driver, run as root, reads the user and group it runs guests as before
# anything else; Debian's libvirt-daemon-system would create them, with a daemon we do not need.
if ! getent group libvirt-qemu >/dev/null; then
  "${sudo_cmd[@]}" groupadd -r libvirt-qemu
fi
if ! getent passwd libvirt-qemu >/dev/null; then
  "${sudo_cmd[@]}" useradd -r -M -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
fi
# As Debian's libvirt-daemon-system does: the QEMU driver checks that the user it runs guests as
# can open /dev/kvm, and when it cannot, it finds its cached QEMU capabilities stale and probes
# QEMU again at every start (seconds each time).
if getent group kvm >/dev/null && ! id -nG libvirt-qemu | tr ' ' '\n' | grep -qx kvm; then
  "${sudo_cmd[@]}" usermod -a -G kvm libvirt-qemu
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo is missing; install a Rust toolchain (1.85 or newer) with rustup" >&2
  exit 1
fi

# cargo-fuzz runs libFuzzer targets on stable Rust with `--sanitizer none` (its instrumentation
# flags, -Cpasses=sancov-module and -Cllvm-args=-sanitizer-coverage-*, are stable).
if $fuzz && [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "install-deps: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
