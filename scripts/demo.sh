#!/usr/bin/env bash
# The main job: install vgrid into .venv and run `vgrid demo` on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
exec .venv/bin/vgrid demo "$@"
