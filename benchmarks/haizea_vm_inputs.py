"""The inputs of a Haizea 1.1 run of an HPDC'08 VM configuration (issue 16): the Blue trace (and
an injected AR set), each lease with the disk image vgrid's sweep gives it, written as Haizea's
XML lease workload so that Haizea and vgrid read the very same leases.

    .venv/bin/python benchmarks/haizea_vm_inputs.py OUT.xml [--trace blue-30days]
        [--inject work_20-dur_3h-size_2medium] [--days 3] [--images 37] [--image-size 4096]
        [--distribution uniform|"7,10 30,1"] [--seed 1]

Images are drawn as ``vgrid sweep`` draws them (``tracefile.assign_images`` over the whole trace
and AR set in submission order, the spec's seed), then the first DAYS days are kept (a prefix
of that order, so the cut leases keep their images). The file is read back and checked against
the leases written (ids, times, sizes, images); prints one JSON line (leases, ARs, the file).
Run Haizea with a configuration whose ``[tracefile] tracefile`` names OUT.xml (e.g.
examples/haizea/vm-mult.conf) and compare with ``benchmarks/haizea_parity.py --trace OUT.xml
--config THAT.conf``. Exits 2 when an input is missing or the file does not read back.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vgrid_runtime import traces  # noqa: E402
from vwn_agents.leasing import read_trace  # noqa: E402
from vwn_agents.leasing.lwfwrite import write_lwf  # noqa: E402
from vwn_agents.leasing.traces import read_with_injection  # noqa: E402
from vwn_agents.leasing.tracefile import assign_images  # noqa: E402

FIELDS = ("id", "type", "submit_s", "duration_s", "n_vms", "per_vm", "image_id", "image_mb", "preemptible",
          "requested_start_s", "real_duration_s")


def build(trace: str, inject: str, days: float, images: int, image_mb: float, distribution: str, seed: int) -> list:
    """The leases of the run (see module doc), in submission order."""
    leases = read_with_injection(traces.resolve(trace), traces.resolve(inject) if inject else None)
    if images:
        leases = assign_images(leases, images, image_mb, distribution, seed)
    leases = sorted(leases, key=lambda l: (l.submit_s, l.id))
    return [l for l in leases if not days or l.submit_s < days * 86400]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the XML file to write")
    ap.add_argument("--trace", default="blue-30days")
    ap.add_argument("--inject", default="", help="AR set name or LWF file")
    ap.add_argument("--days", type=float, default=3.0, help="keep leases submitted in the first DAYS days (0: all)")
    ap.add_argument("--images", type=int, default=37, help="number of images (0: none)")
    ap.add_argument("--image-size", type=float, default=4096.0, help="MB")
    ap.add_argument("--distribution", default="uniform")
    ap.add_argument("--seed", type=int, default=1, help="the sweep spec's seed")
    args = ap.parse_args(argv)
    try:
        leases = build(args.trace, args.inject, args.days, args.images, args.image_size, args.distribution, args.seed)
    except (traces.TraceNameError, ValueError, OSError) as exc:
        print(f"haizea_vm_inputs: {exc}", file=sys.stderr)
        sys.exit(2)
    write_lwf(leases, args.out, name=f"{args.trace}+{args.inject or 'no ARs'}, {args.days:g} days")
    back = sorted(read_trace(args.out).leases, key=lambda l: (l.submit_s, l.id))
    if [[getattr(l, f) for f in FIELDS] for l in back] != [[getattr(l, f) for f in FIELDS] for l in leases]:
        print(f"haizea_vm_inputs: {args.out} does not read back to the same leases", file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"file": args.out, "leases": len(leases), "ars": sum(1 for l in leases if not l.is_be),
                      "images": len({l.image_id for l in leases})}))


if __name__ == "__main__":
    main()
