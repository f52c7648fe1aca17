"""``vgrid guest build`` / ``vgrid guest build-debian``: build the libvirt VWN guests once into
the cache the node agents read (``guest_cache``, default /var/cache/vgrid/guest).

Thin click adapters over :mod:`vwn_agents.drivers.guest` (busybox guest) and
:mod:`vwn_agents.drivers.debian_guest` (debootstrap root file system with python3 and systemd).
"""
from __future__ import annotations

import json
import time

import click

from .common import exit_on


@click.group("guest")
def guest_group():
    """Build the guests of libvirt VWNs (docs/vwn.md, "Drivers")."""


def _errors():
    from vwn_agents.drivers.guest import GuestBuildError
    return exit_on((GuestBuildError, 1))


@guest_group.command("build")
@click.option("--cache", default="/var/cache/vgrid/guest", show_default=True, help="guest cache directory")
def build_cmd(cache):
    """The busybox guest (Debian cloud kernel + busybox initramfs)."""
    from vwn_agents.drivers.guest import build_guest

    @_errors()
    def run():
        g = build_guest(cache)
        click.echo(json.dumps({"kernel": str(g.kernel), "initrd": str(g.initrd), "key": g.key, "built": g.built}))
    run()


@guest_group.command("build-debian")
@click.option("--cache", default="/var/cache/vgrid/guest", show_default=True, help="guest cache directory")
@click.option("--suite", default="bookworm", show_default=True, help="Debian suite for debootstrap")
@click.option("--mirror", default=None, help="Debian mirror URL (default: the first one of /etc/apt/sources.list*)")
def build_debian_cmd(cache, suite, mirror):
    """The Debian guest: debootstrap (python3, systemd as init) on a qcow2 root disk; one JSON line
    with the paths, whether it was built or cached, and the wall time (s)."""
    from vwn_agents.drivers.debian_guest import build_debian_guest

    @_errors()
    def run():
        t0 = time.monotonic()
        g = build_debian_guest(cache, suite, mirror, progress=lambda s: click.echo(f"... {s}", err=True))
        click.echo(json.dumps({"kernel": str(g.kernel), "initrd": str(g.initrd), "disk": str(g.disk),
                               "key": g.key, "built": g.built, "wall_s": round(time.monotonic() - t0, 1)}))
    run()
