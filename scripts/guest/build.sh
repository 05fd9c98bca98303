#!/usr/bin/env bash
# Build the guest image for scripts/guest.sh, only from Debian packages and PyPI wheels:
#   build.sh ARCH KERNEL DIR     (ARCH arm64|x86_64, KERNEL 5.10|6.1|6.12)
# writes DIR/ARCH-KERNEL/{vmlinuz,initrd.cpio,root.ext4}: a small initramfs (busybox and the
# modules that mount the root: virtio PCI and block, ext4, 9p, the virtio console) and the
# root file system (booted as a snapshot, writes discarded), made of
#   the userland (per ARCH, cached as DIR/userland-ARCH/): bookworm's busybox, bash, python3,
#     BCC, bpftrace, binutils, perf (6.1's), ldd, libstdc++ and libgomp, and the project's PyPI
#     dependencies (wheels for the guest's architecture) in /usr/local/lib/python3.11/dist-packages;
#   the kernel part: /init, the kernel config and headers (for BCC).
# Packages come through private apt roots (download only; the host's apt is untouched),
# from the mirror the host's apt already uses.
set -euo pipefail
arch=$1 kernel=$2 dir=$3
out=$dir/$arch-$kernel
here=$(cd "$(dirname "$0")" && pwd)
clone=$(cd "$here/../.." && pwd)
nice="nice -n 10"
log() { printf '== guest build: %s\n' "$*" >&2; }

case $arch in arm64) debarch=arm64 pyplat=aarch64 ;; x86_64) debarch=amd64 pyplat=x86_64 ;; esac
case $kernel in 5.10) suite=bullseye ;; 6.1) suite=bookworm ;; 6.12) suite=trixie ;; esac
mirror=$(awk '/^URIs:/{print $2}' /etc/apt/sources.list.d/debian.sources | grep -vm1 security)
secmirror=$(awk '/^URIs:/{print $2}' /etc/apt/sources.list.d/debian.sources | grep -m1 security)

# A private apt root for one suite and architecture; sets $apt (options for apt-get/apt-cache).
aptroot() { # $1=suite
    local a=$dir/../apt/$debarch-$1 k="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
    apt="-o Dir=$a -o Dir::Etc=$a/etc -o Dir::State=$a/state -o Dir::Cache=$a/cache
         -o Dir::State::status=$a/status -o APT::Architecture=$debarch
         -o APT::Architectures=$debarch -o Debug::NoLocking=1 -o APT::Sandbox::User=root"
    mkdir -p "$a"/etc/preferences.d "$a"/state/lists/partial "$a"/cache/archives/partial
    touch "$a/status"
    printf 'deb [arch=%s %s] %s %s main\n' \
        "$debarch" "$k" "$mirror" "$1" "$debarch" "$k" "$mirror" "$1-updates" \
        "$debarch" "$k" "$secmirror" "$1-security" >"$a/etc/sources.list"
    apt-get $apt update -qq
}
unpack() { # $1=dir, then .deb files
    local d=$1; shift
    for f in "$@"; do $nice dpkg-deb -x "$f" "$d"; done
}
mkcpio() { # $1=dir $2=archive; everything owned by root
    (cd "$1" && find . | $nice cpio -o -H newc -R 0:0 --quiet) >"$2"
}
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")        # next to the userland: hard links need one fs
trap 'rm -rf "$tmp"' EXIT

# 1. The userland, once per ARCH.
userland=$dir/userland-$arch
if [ ! -d "$userland" ]; then
    log "userland for $arch (bookworm packages, PyPI wheels)"
    aptroot bookworm
    debs=$tmp/debs; mkdir -p "$debs"
    apt-get $apt install --download-only -y -qq --no-install-recommends \
        -o Dir::Cache::archives="$debs" busybox-static bash python3 python3-bpfcc bpfcc-tools \
        bpftrace binutils linux-perf libc6 libc-bin libstdc++6 libgomp1 >/dev/null
    r=$tmp/userland; mkdir -p "$r"
    unpack "$r" "$debs"/*.deb
    rm -rf "$r"/usr/share/{doc,man,locale,lintian,info}
    mkdir -p "$r"/{proc,sys,dev,tmp,run,root,boot,sbin} "$r"/usr/local/bin
    chmod 1777 "$r/tmp"
    ln -sf bash "$r/bin/sh"           # dash (Debian's /bin/sh) is not unpacked
    echo root:x:0:0:root:/root:/bin/bash >"$r/etc/passwd"   # base-passwd's postinst is not run
    echo root:x:0: >"$r/etc/group"
    mknod -m 600 "$r/dev/console" c 5 1
    # the project's runtime dependencies and pytest (the tests run inside), as wheels for the
    # guest's python 3.11
    deps=$(python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$clone/pyproject.toml")
    site=$r/usr/local/lib/python3.11/dist-packages
    # shellcheck disable=SC2086
    $nice python3 -m pip install -qq --disable-pip-version-check --no-warn-conflicts --no-compile \
        --target "$site" --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
        --platform manylinux_2_36_$pyplat --platform manylinux_2_28_$pyplat \
        --platform manylinux_2_17_$pyplat --platform manylinux2014_$pyplat $deps pytest
    rm -rf "$site/bin"                # console scripts with the host's interpreter
    printf '#!/bin/sh\nexec python3 -m profinfer_perfetto "$@"\n' >"$r/usr/local/bin/profinfer-perfetto"
    chmod +x "$r/usr/local/bin/profinfer-perfetto"
    # what py3compile would do in the packages' postinst (the .pyc format of 3.11.x is fixed)
    $nice python3 -m compileall -q -j0 -s "$r" -p / "$r/usr/lib/python3.11" \
        "$r/usr/lib/python3/dist-packages" "$site" >/dev/null || true
    mv "$r" "$userland"
    rm -rf "$debs"
fi

# 2. The kernel of the suite, its headers and modules.
log "kernel $kernel ($suite) for $arch"
aptroot "$suite"
kpkg=$(apt-cache $apt depends "linux-image-$debarch" | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -1)
kver=${kpkg#linux-image-}
common=$(apt-cache $apt depends "linux-headers-$kver" | sed -n 's/.*Depends: \(linux-headers-[^ ]*-common\)$/\1/p' | head -1)
(cd "$tmp" && apt-get $apt download -qq "$kpkg" "linux-headers-$kver" "$common")
k=$tmp/kernel; r=$tmp/root; i=$tmp/initramfs; mkdir -p "$k" "$r/boot" "$i"/{bin,dev,proc,sys,newroot}
unpack "$k" "$tmp/$kpkg"_*.deb
unpack "$r" "$tmp"/linux-headers-*.deb
# The initramfs's modules (or built in, whatever this kernel has), decompressed, dependencies
# first (from each module's .modinfo: modules.dep is made by the package's postinst); their
# load order goes to /modules.
kdir=$k/lib/modules/$kver
[ -d "$kdir" ] || kdir=$k/usr/lib/modules/$kver
: >"$i/modules"
module() { # $1=module name
    local f m d
    f=$(find "$kdir/kernel" -name "$1.ko*" -o -name "${1//_/-}.ko*" | head -1)
    m=$(basename "$f"); m=${m%.xz}; m=${m%.zst}
    [ -n "$f" ] && ! grep -qx "$m" "$i/modules" || return 0
    case $f in *.xz) xz -dc "$f" ;; *.zst) zstd -qdc "$f" ;; *) cat "$f" ;; esac >"$i/$m"
    for d in $(tr '\0' '\n' <"$i/$m" | sed -n 's/^depends=//p' | tr , ' '); do module "$d"; done
    echo "$m" >>"$i/modules"
}
for name in virtio_pci virtio_blk crc32c_generic ext4 virtio_console 9pnet_virtio 9p; do module "$name"; done
cp "$userland/bin/busybox" "$i/bin/"
mknod -m 600 "$i/dev/console" c 5 1
install -m 755 "$here/init" "$i/init"
touch "$i/initramfs"
cp "$k/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$k/boot/config-$kver" "$r/boot/"           # bpftrace reads /boot/config-$(uname -r)
# BCC finds the headers through /lib/modules/$(uname -r)/build (in /usr/lib on trixie)
# (its build and source links are relative to /usr/lib/modules/$kver: link the folder)
if [ -d "$r/usr/lib/modules" ]; then mkdir -p "$r/lib"; ln -s ../usr/lib/modules "$r/lib/modules"; fi
mkdir -p "$r/lib/modules/$kver"
[ -L "$r/lib/modules/$kver/build" ] || ln -s "/usr/src/linux-headers-$kver" "$r/lib/modules/$kver/build"
rm -rf "$r"/usr/share/{doc,man,lintian}
install -m 755 "$here/init" "$r/init"
# the root: the userland (hard links, not copies) and the kernel part, 3 GiB free
cp -al "$userland" "$tmp/fs"
cp -a --remove-destination "$r/." "$tmp/fs/"
rm -rf "$out.new"; mkdir "$out.new"
size=$(( $(du -sm "$tmp/fs" | cut -f1) + 3072 ))
$nice mke2fs -q -t ext4 -O ^has_journal,^metadata_csum -d "$tmp/fs" "$out.new/root.ext4" "${size}M" >/dev/null
mkcpio "$i" "$out.new/initrd.cpio"
mv "$tmp/vmlinuz" "$out.new/vmlinuz"
echo "$kver" >"$out.new/kernel-version"
rm -rf "$out"; mv "$out.new" "$out"
log "done: $out ($kver)"
