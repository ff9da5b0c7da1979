#!/usr/bin/env bash
# Installs the Debian packages Trainscope needs. Idempotent: when everything is present it
# only runs dpkg-query once (well under a second) and touches nothing.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev qt6-svg-dev libqt6sql6-sqlite libqt6opengl6-dev libgl-dev
  libsqlite3-dev sqlite3
  nlohmann-json3-dev libcli11-dev libzstd-dev
  libsodium-dev  # HMAC-SHA256/SHA-256/randomness of the control channel (static, hidden in the agent)
  zlib1g-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  libgtest-dev libbenchmark-dev
  xvfb xauth
  clang-format ccache
  clang libclang-rt-14-dev
  python3-torch  # PyTorch 1.13 (CPU, gloo): torch-ddp demo, tst_torch_live, tst_torch_traces; run with /usr/bin/python3
)

missing=()
for p in "${PKGS[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "trainscope: installing missing packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "trainscope: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
