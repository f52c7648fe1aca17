#!/usr/bin/env bash
# Creates .venv and installs vgrid into it (editable, with the test extra).
# Works as root on a fresh Debian 12 machine: installs python3 + venv with apt when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "vgrid bootstrap: need root to apt-get install $*" >&2; return 1
  fi
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then apt_install python3 python3-venv python3-pip; fi
if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "vgrid needs Python >= 3.11 ($PY is $("$PY" --version 2>&1))" >&2; exit 2
fi
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then apt_install python3-venv; fi

if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
stamp=.venv/.install-stamp
want=$(sha256sum setup.py | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]"
  echo "$want" > "$stamp"
fi

# Exported for the caller's convenience.
apt_install_if_missing() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
}
