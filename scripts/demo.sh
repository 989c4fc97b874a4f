#!/usr/bin/env bash
# Mounts the simulated host (profile "mixed" unless PROFILE says otherwise) and shows what
# vgpuctl sees there: `list`, `types` and `check`. Unmounts on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-mixed}

cargo build --quiet --release -p vgpu-sim -p vgpu-cli
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
