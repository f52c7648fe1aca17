#!/usr/bin/env bash
# The test command: install vgrid into .venv plus the Debian packages the tests use
# (a real slapd with the GLUE schema, a real PostgreSQL server), then run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
apt_install_if_missing slapd ldap-utils glue-schema postgresql openssl python3 e2fsprogs util-linux passwd mount qemu-utils
exec .venv/bin/python -m pytest -q "$@"
