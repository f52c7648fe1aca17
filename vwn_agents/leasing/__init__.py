"""The vgrid lease engine: advance reservations, best-effort and immediate leases, backfilling,
suspend/resume, and image staging and reuse (seed 000 Sections 5, 6 and 8; seed 001).

Layers (Haizea's): ``scheduler`` (orchestration) -> ``besteffort``/``ar`` (temporal
placement) -> ``mapper`` (spatial placement) -> ``staging``/``imagepool`` (preparation) ->
``slottable`` (bookkeeping) -> ``enactment`` (the interface, and simulated nodes; node agents
are enacted by ``vwn_agents.node_enactment``) -> ``traces`` (input) -> ``preemption`` (policy)
-> ``accounting`` (measurement). Seed 002's preemption for local requests: ``requesttypes``,
``overhead`` (eq. (3)-(8)), ``candidates`` (eq. (1)-(2)), ``candidatepolicy`` (NOP, MOV,
MLIP, MOML) and ``localpreemption``; ``lublin`` and ``requestmix`` generate synthetic input (the
Lublin-Feitelson model, seed 002's requests). See docs/leasing.md. The live engine of a CE agent is
``vwn_agents.lease_engine``; nothing here imports ``vwn_agents`` outside this package.
"""
from .config import ConfigError, LeaseConfig, load_config
from .enactment import Enactment, OverCommitError, SimulatedNodes
from .model import Lease, LeaseState, LeaseType, Node, resource_vector
from .scheduler import LeaseScheduler
from .simulate import SimulationResult, simulate
from .slottable import Reservation, ResKind, SlotTable
from .traces import TraceError, Workload, read_site, read_trace, uniform_site

__all__ = [
    "ConfigError", "LeaseConfig", "load_config", "Enactment", "OverCommitError", "SimulatedNodes",
    "Lease", "LeaseState", "LeaseType", "Node", "resource_vector", "LeaseScheduler", "SimulationResult",
    "simulate", "Reservation", "ResKind", "SlotTable", "TraceError", "Workload", "read_site", "read_trace",
    "uniform_site",
]
