#!/usr/bin/env bash
# Brings a Debian machine (with or without the CUDA toolkit) to a built flashcheck in build/:
#   1. installs the Debian packages that are missing (apt-get, as root or through sudo);
#   2. creates the project-local Python venv .venv/ from the pinned reports/requirements.txt;
#   3. configures (first time only) and builds.
# Every step checks before it acts, so a re-run installs nothing twice and rebuilds only what changed.
# Progress goes to stderr, so callers' stdout stays theirs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { echo "bootstrap: $*" >&2; }

# --- 1. Debian packages --------------------------------------------------------------------------
# libtorch-dev and python3-torch (Debian's CPU libtorch 1.13): the torch.* subjects and the PyTorch ops
packages=(cmake ninja-build g++ git python3 python3-venv
          libgtest-dev libgmock-dev librapidcheck-dev libboost-dev libeigen3-dev libcli11-dev nlohmann-json3-dev
          libtorch-dev python3-torch)
if command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    # `env` so the setting survives sudo's environment reset (an apt prompt would hang an unattended run)
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
else
  say "not a Debian system: install these (or equivalents) yourself: ${packages[*]}"
fi

# --- 2. Python venv for the reports ----------------------------------------------------------------
requirements=reports/requirements.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating .venv from $requirements"
  python3 -m venv --clear .venv >&2
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$stamp"
fi

# --- 3. configure and build ----------------------------------------------------------------------
# The CUDA toolkit's default home is often not on PATH; CMake also looks there (cmake/FlashcheckOptions.cmake).
# build.ninja, not CMakeCache.txt: a configure that failed leaves a cache but no build file.
if [ ! -f build/build.ninja ]; then
  say "configuring build/"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCHECK_WERROR=ON >&2
fi
cmake --build build -j "$(nproc)" >&2
