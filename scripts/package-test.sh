#!/usr/bin/env bash
# Builds the Debian package (debian/, dpkg-buildpackage -b) from the binaries `cargo test` built
# (the release build's when there is one), installs it with dpkg -i, checks vgpuctl --version,
# man -w vgpuctl and the bash completion, removes it with dpkg -r and checks that none of the
# files it installed is left and that /etc holds nothing new. The .deb is left in
# $CARGO_TARGET_DIR/debian/ (target/debian/ by default). Run as root; refuses to run when a
# vgpuctl package is installed already (removing it would take the host's vgpuctl away).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
profile=dev dir=debug
if [ -x "$target/release/vgpuctl" ]; then profile=release dir=release; fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

if dpkg-query -W -f='${Status}' vgpuctl 2>/dev/null | grep -q "ok installed"; then
  echo "package-test: the vgpuctl package is installed on this machine; dpkg -r it first" >&2
  exit 1
fi

start=$SECONDS
# Each line of the build log with the seconds since the start.
ts_lines() { while IFS= read -r line; do echo "$((SECONDS - start)) $line"; done; }
# Little to do after `cargo test` (or a release build): it built these, or most of them.
cargo build --quiet --profile "$profile" -p vgpu-cli -p vgpu-cli-libvirt --bins --example gen-docs

out="$target/debian"
rm -rf "$out" && mkdir -p "$out"
version=$(dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="vgpuctl_${version}_${arch}.deb"
# noddebs: no -dbgsym package (compressing an unoptimised build's debug information is slow).
# dpkg-buildpackage writes next to the source tree, as it always does; the files move to $out.
VGPUCTL_BUILD="$target/$dir/vgpuctl" DEB_BUILD_OPTIONS="noddebs nocheck" \
  dpkg-buildpackage -b --no-sign 2>&1 | ts_lines >"$out/build.log" ||
  { tail -40 "$out/build.log" >&2; exit 1; }
for f in "$deb" "vgpu_${version}_${arch}.buildinfo" "vgpu_${version}_${arch}.changes"; do
  mv "../$f" "$out/"
done
dh_clean
built=$SECONDS
echo "package-test: built $out/$deb ($profile profile) in $((built - start)) s"

find /etc -xdev | sort >"$out/etc.before"
installed=false
cleanup() { if $installed; then "${sudo_cmd[@]}" dpkg -r vgpuctl >/dev/null || true; fi; }
trap cleanup EXIT

"${sudo_cmd[@]}" dpkg -i "$out/$deb" >/dev/null
installed=true
dpkg-query -L vgpuctl | sort >"$out/files"
dpkg-deb -f "$out/$deb" Depends Recommends Suggests | sed 's/^/package-test: /'

fail() { echo "package-test: $*" >&2; exit 1; }
# vgpuctl runs without libvirt: its library is recommended, not depended on.
dpkg-deb -f "$out/$deb" Depends | grep -q libvirt && fail "the package depends on libvirt"
dpkg-deb -f "$out/$deb" Recommends | grep -q 'libvirt0' || fail "the package does not recommend libvirt0"
[ "$(/usr/bin/vgpuctl --version)" = "vgpuctl $version" ] || fail "vgpuctl --version is not vgpuctl $version"
[ "$(man -w vgpuctl)" = /usr/share/man/man8/vgpuctl.8.gz ] || fail "man -w vgpuctl: $(man -w vgpuctl 2>&1)"
[ "$(man -w 8 vgpuctl-create)" = /usr/share/man/man8/vgpuctl-create.8.gz ] || fail "no vgpuctl-create(8)"
for page in vgpu-host.toml vgpu-tenants.toml vgpu-hook.toml vgpu-usage.toml; do
  [ "$(man -w 5 "$page")" = "/usr/share/man/man5/$page.5.gz" ] || fail "no $page(5)"
done
[ "$(bash -c 'source /usr/share/bash-completion/completions/vgpuctl && complete -p vgpuctl')" \
  = "complete -o bashdefault -o default -o nosort -F _vgpuctl vgpuctl" ] || fail "no bash completion for vgpuctl"
for f in /usr/bin/vgpuctl-libvirt /usr/share/zsh/vendor-completions/_vgpuctl \
  /usr/share/fish/vendor_completions.d/vgpuctl.fish /usr/lib/udev/rules.d/60-vgpu.rules \
  /usr/lib/systemd/system/vgpu-restore.service /usr/share/vgpu/vgpu.rules.yml \
  /usr/share/vgpu/vgpu.json; do
  [ -f "$f" ] || fail "$f is not installed"
done
grep -qx 'ExecStart=/usr/bin/vgpuctl restore' /usr/lib/systemd/system/vgpu-restore.service ||
  fail "vgpu-restore.service does not run /usr/bin/vgpuctl"
grep -q 'RUN+="/usr/bin/vgpuctl restore --device %k"' /usr/lib/udev/rules.d/60-vgpu.rules ||
  fail "60-vgpu.rules does not run /usr/bin/vgpuctl"

"${sudo_cmd[@]}" dpkg -r vgpuctl >/dev/null
installed=false
left=$(while read -r f; do if [ -L "$f" ] || [ -f "$f" ]; then echo "$f"; fi; done <"$out/files")
[ -z "$left" ] || fail "left behind after dpkg -r: $left"
find /etc -xdev | sort >"$out/etc.after"
new_in_etc=$(comm -13 "$out/etc.before" "$out/etc.after")
[ -z "$new_in_etc" ] || fail "new in /etc after dpkg -r: $new_in_etc"
echo "package-test: installed $(grep -c . "$out/files") paths, checked and removed in $((SECONDS - built)) s"
