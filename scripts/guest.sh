#!/usr/bin/env bash
# Run a command as root in an emulated Linux machine (qemu TCG, never KVM):
#   scripts/guest.sh ARCH KERNEL -- COMMAND...
#   ARCH: arm64 | x86_64;  KERNEL: 5.10 | 6.1 | 6.12 (Debian bullseye's, bookworm's, trixie's)
# The guest has bookworm's BCC, bpftrace, binutils and Python with the project's dependencies;
# this clone and $PROFINFER_CACHE are mounted (9p, read-write) at the same paths, the command
# runs in the clone with `profinfer-perfetto` on PATH, PROFINFER_CACHE and PROFINFER_TP_BIN
# passed where set. Its stdout and stderr come out on this script's, and its exit status is
# this script's. The image is built by scripts/guest/build.sh the first time (minutes) and
# cached under $PROFINFER_CACHE/guests/<hash of scripts/guest/ and the dependencies>/.
# Environment: PROFINFER_GUEST_CPU (arm64 -cpu, default max,pauth-impdef=on: BTI, PAC, PMUv3),
# PROFINFER_GUEST_TIMEOUT (seconds, default 3600), PROFINFER_GUEST_MEM (default 4G).
# Host packages: qemu-system-arm, qemu-system-x86, cpio, xz-utils, zstd.
set -euo pipefail
usage() { echo "usage: $0 arm64|x86_64 5.10|6.1|6.12 -- COMMAND..." >&2; exit 2; }
[ $# -ge 4 ] && [ "$3" = -- ] || usage
arch=$1 kernel=$2; shift 3
case $kernel in 5.10 | 6.1 | 6.12) ;; *) usage ;; esac
case $arch in
    # One host thread runs both vCPUs (thread=single): with a thread per vCPU, qemu 7.2 at
    # times ran a wrong instruction in the slot where the kernel single-steps a probed one, and
    # the profiled 2-thread target died (2026-12-03, Debian's 6.1 and 6.12, a BPF program that
    # only counts hits at 231 sites: 5 SIGSEGVs in 410 runs, pc in that slot; 0 in 210 runs on
    # one host thread): docs/internals.md.
    arm64) qemu=(qemu-system-aarch64 -M virt -accel tcg,thread=single
                 -cpu "${PROFINFER_GUEST_CPU:-max,pauth-impdef=on}")
           console=ttyAMA0 ;;
    x86_64) qemu=(qemu-system-x86_64 -accel tcg -cpu max) console=ttyS0 ;;
    *) usage ;;
esac
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
clone=$(dirname "$scripts")
cache=${PROFINFER_CACHE:-/var/cache/profinfer-perfetto}
timeout=${PROFINFER_GUEST_TIMEOUT:-3600}

# The image: rebuilt when the builder, the init or the project's dependencies change.
key=$( (cat "$scripts"/guest/*
        python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"])' \
            "$clone/pyproject.toml") | sha256sum | cut -c1-16)
dir=$cache/guests/$key
img=$dir/$arch-$kernel
if [ ! -f "$img/root.ext4" ]; then
    mkdir -p "$dir"
    # one build at a time; a concurrent caller waits, then finds the image
    flock "$dir/.lock" bash -c '[ -f "$2/$3-$4/root.ext4" ] || bash "$1/guest/build.sh" "$3" "$4" "$2"' \
        _ "$scripts" "$dir" "$arch" "$kernel"
fi

# What the guest's /init reads (env, cmd) and writes (rc), shared through 9p.
run=$(mktemp -d "${TMPDIR:-/tmp}/guest-run.XXXXXX")
trap 'rm -rf "$run"' EXIT
mkdir -p "$cache"
printf 'clone=%q\ncache=%q\n' "$clone" "$cache" >"$run/env"
{
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root'
    for v in PROFINFER_CACHE PROFINFER_TP_BIN; do
        [ -z "${!v+x}" ] || printf 'export %s=%q\n' "$v" "${!v}"
    done
    # qemu 7.2's TCG emulates some AVX2 code wrongly: numpy's AVX2 argsort (np.unique's)
    # returned a wrong order there, which lost ops; numpy's baseline (SSE) code is right.
    [ "$arch" != x86_64 ] || echo 'export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"'
    printf 'exec'; printf ' %q' "$@"; echo
} >"$run/cmd"

shares=()
for share in "run=$run" "clone=$clone" "cache=$cache"; do   # qemu escapes a comma as two
    p=${share#*=}
    shares+=(-fsdev "local,id=${share%%=*},path=${p//,/,,},security_model=none,multidevs=remap"
             -device "virtio-9p-pci,fsdev=${share%%=*},mount_tag=${share%%=*}")
done
rc=0
timeout -k 10 "$timeout" nice -n 10 "${qemu[@]}" -smp 2 -m "${PROFINFER_GUEST_MEM:-4G}" \
    -nodefaults -display none -no-reboot \
    -kernel "$img/vmlinuz" -initrd "$img/initrd.cpio" \
    -append "console=$console rdinit=/init quiet loglevel=0 panic=-1" \
    -drive "file=${img//,/,,}/root.ext4,format=raw,if=none,id=root,snapshot=on" \
    -device virtio-blk-pci,drive=root \
    -serial stdio \
    -device virtio-serial-pci -chardev file,id=err,path=/dev/stderr,append=on \
    -device virtconsole,chardev=err \
    "${shares[@]}" </dev/null || rc=$?
if [ -f "$run/rc" ]; then
    exit "$(cat "$run/rc")"
elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "guest.sh: the $arch $kernel guest was stopped after PROFINFER_GUEST_TIMEOUT=$timeout s." >&2
else
    echo "guest.sh: the $arch $kernel guest stopped without finishing the command (qemu exit status $rc): it failed to boot or crashed." >&2
fi
exit 125
