#!/usr/bin/env bash
# Mounts the simulated host (profile "mixed" unless PROFILE says otherwise) and shows what
# vgpuctl sees there (`list`, `types`, `check`), brings it to examples/host.toml (`plan`,
# `apply`, `list` again), then gives a VM a vGPU through libvirt's embedded QEMU driver and
# takes it back. Unmounts on exit. It also writes the man pages to target/doc-pages/.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-mixed}

echo "demo: building vgpuctl, vgpuctl-libvirt, vgpu-sim and the test NVML (release; minutes the first time)"
cargo build --release -p vgpu-sim -p vgpu-cli -p vgpu-cli-libvirt -p vgpu-nvml-fake
cargo build --quiet --release -p vgpu-cli --example gen-docs
target/release/examples/gen-docs target/doc-pages
echo "demo: man pages in target/doc-pages (man -l target/doc-pages/man8/vgpuctl.8)"
sim=target/release/vgpu-sim
vgpuctl=target/release/vgpuctl

host=$(mktemp -d)
"$sim" mount --profile "$profile" "$host" &
sim_pid=$!
cleanup() {
  kill -TERM "$sim_pid" 2>/dev/null || true
  wait "$sim_pid" 2>/dev/null || true
  rmdir "$host" 2>/dev/null || true
}
trap cleanup EXIT

# Wait for the mount to come up (poll, with a 10 s deadline), or for the simulator to fail.
deadline=$((SECONDS + 10))
until mountpoint -q "$host"; do
  if ! kill -0 "$sim_pid" 2>/dev/null; then
    echo "demo: vgpu-sim failed to mount (is /dev/fuse present, and are you root?)" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "demo: vgpu-sim did not mount $host within 10 s" >&2
    exit 1
  fi
  sleep 0.05
done

for cmd in "list" "types" "check"; do
  echo
  echo "\$ vgpuctl --root $host $cmd"
  status=0
  # shellcheck disable=SC2086
  "$vgpuctl" --root "$host" $cmd || status=$?
  [ "$status" -eq 0 ] || echo "(exit status $status)"
done

state=$(mktemp -d)
libvirt=$(mktemp -d)
uri="qemu:///embed?root=$libvirt"
trap 'cleanup; rm -rf "$state" "$libvirt"' EXIT
run() {
  echo
  echo "\$ vgpuctl $*"
  status=0
  "$vgpuctl" --root "$host" --state-root "$state" --connect "$uri" "$@" || status=$?
  [ "$status" -eq 0 ] || echo "(exit status $status)"
}

# The desired state, in frame buffer: what would change (exit 4: changes pending), the change,
# and the host afterwards.
run plan -f examples/host.toml
run apply -f examples/host.toml
run list

# A VM gets a vGPU through libvirt's QEMU driver, run in-process (no daemon): define a
# domain with virsh, attach a new T4-4Q to it (created, defined, named after the domain; the
# T4 holds 4 GiB vGPUs now, one type at a time), show who holds what and the hostdev libvirt
# keeps, then detach and destroy it.
cat >"$libvirt/demo-vm.xml" <<XML
<domain type='kvm'><name>demo-vm</name><memory unit='MiB'>256</memory>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>
XML
echo
echo "\$ virsh define demo-vm.xml"
virsh -q -c "$uri" define "$libvirt/demo-vm.xml"
attached=$(run attach demo-vm --gpu 0000:3b:00.0 --type T4-4Q)
echo "$attached"
id=$(echo "$attached" | sed -n 's/^demo-vm: \([0-9a-f-]\{36\}\) .*/\1/p')
run owners
echo
echo "\$ virsh dumpxml --inactive demo-vm | (the hostdev)"
virsh -c "$uri" dumpxml --inactive demo-vm | sed -n '/<hostdev/,/<\/hostdev>/p'
run detach demo-vm "$id" --destroy
