#!/usr/bin/env bash
# The Vulkan headers of Debian trixie's libvulkan-dev, for building llama.cpp's Vulkan backend
# on bookworm: bookworm's headers (1.3.239) lack vk::LayerSettingEXT, which ggml-vulkan.cpp
# uses. Headers only: the loader that runs stays bookworm's libvulkan1.
#
#     scripts/vulkan_headers.sh DIR     # prints DIR/usr/include once it holds vulkan/vulkan_core.h
#
# The .deb comes through a private apt root under DIR (its own sources, lists and cache), from
# the mirror this machine's apt already uses, so /etc/apt and /var/lib/apt stay untouched.
set -euo pipefail
dir=${1:?usage: vulkan_headers.sh DIR}
version=1.4.309.0-1
include="$dir/usr/include"
if [ -f "$include/vulkan/vulkan_core.h" ]; then echo "$include"; exit 0; fi

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
    || true)
mirror=${mirror:-http://deb.debian.org/debian}
apt="$dir/apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
    >"$apt/sources.list"
cat >"$apt/apt.conf" <<EOF
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::State::Lists "$apt/lists";
Dir::State::Status "/var/lib/dpkg/status";
Dir::Cache "$apt/cache";
APT::Sandbox::User "root";
EOF
export APT_CONFIG="$apt/apt.conf"
apt-get update -qq >&2
(cd "$apt/debs" && apt-get download -qq "libvulkan-dev=$version" >&2)
dpkg-deb -x "$apt/debs/libvulkan-dev_${version}_amd64.deb" "$dir"
echo "$include"
