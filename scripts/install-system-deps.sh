#!/usr/bin/env bash
# Installs the Debian packages driverless builds and tests against: the AMD firmware (non-free-firmware
# component), the kernel source for the table generator, LLVM 15 as the encoding/compiler oracle, libusb.
# Runs only as root on Debian; elsewhere it says what to install and exits 0.
set -euo pipefail
pkgs=(firmware-amd-graphics linux-source-6.1 clang-15 lld-15 llvm-15 libusb-1.0-0 libusb-1.0-0-dev)

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || [ ! -f /etc/debian_version ]; then
  echo "install-system-deps: not root on Debian; install these yourself if you need them: ${pkgs[*]}"
  exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# firmware-amd-graphics lives in non-free-firmware: add that component to the existing Debian entries
# (deb822 .sources files or one-line .list files), whatever mirror host they name.
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  grep -q 'debian' "$f" || continue
  sed -i -E '/^Components:/{/non-free-firmware/!s/$/ non-free-firmware/}' "$f"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  sed -i -E '/^deb .*debian.* main/{/non-free-firmware/!s/$/ non-free-firmware/}' "$f"
done

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
