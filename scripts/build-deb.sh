#!/usr/bin/env bash
# Builds the thaw Debian package from bin/ (make build) with dpkg-deb:
#   scripts/build-deb.sh VERSION [OUT_DIR]
# VERSION is the build's (git describe); Debian versions start with a digit,
# so a bare commit 7e06040 becomes 0.0~git7e06040 and a tag v1.2.0-3-gabc
# becomes 1.2.0.3.gabc ('-' would start the Debian revision). Prints the
# package's path.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:?usage: build-deb.sh VERSION [OUT_DIR]}
out=${2:-build}
if [[ $version =~ ^v?[0-9]+(\.[0-9]+)+ ]]; then
	deb_version=${version#v} # a release tag, with what git describe adds
else
	deb_version="0.0~git$version" # a commit (which may well start with a digit)
fi
deb_version=${deb_version//-/.}
arch=$(dpkg --print-architecture)

for f in bin/thawd bin/thaw bin/libthaw_shim.so bin/snapbpf_capture.bpf.o bin/faulttrace.bpf.o; do
	[ -f "$f" ] || { echo "build-deb: $f is missing (make build)" >&2; exit 1; }
done

stage=$(mktemp -d "${TMPDIR:-/tmp}/thaw-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
umask 022
install -d "$root"/DEBIAN "$root"/usr/bin "$root"/usr/lib/thaw "$root"/lib/systemd/system \
	"$root"/usr/lib/sysusers.d "$root"/etc/thaw "$root"/usr/share/doc/thaw \
	"$root"/usr/share/bash-completion/completions "$root"/usr/share/zsh/vendor-completions \
	"$root"/usr/share/fish/vendor_completions.d
install -m 0755 bin/thawd bin/thaw "$root"/usr/bin/
install -m 0644 bin/libthaw_shim.so bin/snapbpf_capture.bpf.o bin/faulttrace.bpf.o "$root"/usr/lib/thaw/
install -m 0644 deploy/thawd.service "$root"/lib/systemd/system/thawd.service
install -m 0644 deploy/thaw.sysusers "$root"/usr/lib/sysusers.d/thaw.conf
install -m 0644 deploy/thawd.yaml "$root"/etc/thaw/thawd.yaml
bin/thaw completion bash >"$root"/usr/share/bash-completion/completions/thaw
bin/thaw completion zsh >"$root"/usr/share/zsh/vendor-completions/_thaw
bin/thaw completion fish >"$root"/usr/share/fish/vendor_completions.d/thaw.fish
install -m 0644 README.md docs/operations.md docs/security.md "$root"/usr/share/doc/thaw/
{
	echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
	echo "Upstream-Name: thaw"
	echo
	echo "Files: *"
	echo "License: Apache-2.0"
	echo
	sed 's/^$/./; s/^/ /' LICENSE
} >"$root"/usr/share/doc/thaw/copyright
chmod 0644 "$root"/usr/share/bash-completion/completions/thaw "$root"/usr/share/zsh/vendor-completions/_thaw \
	"$root"/usr/share/fish/vendor_completions.d/thaw.fish "$root"/usr/share/doc/thaw/copyright

install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root"/DEBIAN/
echo /etc/thaw/thawd.yaml >"$root"/DEBIAN/conffiles
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$deb_version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" deploy/debian/control.in >"$root"/DEBIAN/control
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root"/DEBIAN/md5sums

mkdir -p "$out"
deb="$out/thaw_${deb_version}_${arch}.deb"
rm -f "$out"/thaw_*_"$arch".deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
