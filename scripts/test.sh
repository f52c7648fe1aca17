#!/usr/bin/env bash
# The test command: install vgrid into .venv plus the Debian packages the tests use
# (a real slapd with the GLUE schema, a real PostgreSQL server), then run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
apt_install_if_missing slapd ldap-utils glue-schema postgresql openssl python3 e2fsprogs util-linux passwd mount \
  qemu-system-x86 libvirt-daemon-system libvirt-clients libvirt-dev pkg-config gcc python3-dev busybox-static qemu-utils \
  chromium debootstrap
# libvirt-python compiles against libvirt-dev (installed above): the libvirt extra after it
.venv/bin/python -c 'import libvirt' 2>/dev/null || .venv/bin/python -m pip install -q -e ".[libvirt]"
exec .venv/bin/python -m pytest -q "$@"
