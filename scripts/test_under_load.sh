#!/usr/bin/env bash
# The suite under CPU load (issue 9): stress-ng keeps 4 CPU hogs running (more than this 2-core
# machine has) while scripts/test.sh runs twice; stress-ng is stopped on exit, whatever happens.
# Arguments go to pytest, e.g. `bash scripts/test_under_load.sh tests/test_ce_agent_leases.py`.
# STRESS_CPUS (default 4) and RUNS (default 2) change the load and the number of runs.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null || { apt-get update -qq && apt-get install -y -qq stress-ng; }
stress-ng --cpu "${STRESS_CPUS:-4}" --timeout 3600s >/dev/null 2>&1 &
stress_pid=$!
trap 'kill "$stress_pid" 2>/dev/null || true; wait "$stress_pid" 2>/dev/null || true' EXIT
for run in $(seq "${RUNS:-2}"); do
    echo "== run $run of ${RUNS:-2} under stress-ng --cpu ${STRESS_CPUS:-4}"
    bash scripts/test.sh "$@"
done
