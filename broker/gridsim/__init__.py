"""vgrid's grid simulator: seed 004 Section 6 in simulated time, with the live broker's code.

Layers (one concern per module):

- :mod:`.model`: CE and job descriptions, CE spec files (seed 004 Table II, TOML, SWF sites);
- :mod:`.workloads`: Poisson workloads (seed 004 Section 6.2.1) and SWF trace replay;
- :mod:`.ce_models`: simulated enactment, FCFS LRMS and fair-share virtual worker nodes;
- :mod:`.engine`: the event loop: ISM refreshes from the CEs' GIP (:mod:`infosys.gip`),
  matchmaking with :class:`broker.matchmaker.Matchmaker`, feedback counters, dispatch;
- :mod:`.metrics`: delay, makespan, queue time, job share per CE;
- :mod:`.report`: the sweeps behind seed 004's Figures 8-11 and issue 6's acceptance checks;
- :mod:`.figures`: those figures as PNG (matplotlib, Agg).

Command line: ``vgrid simulate-grid`` and ``vgrid report`` (:mod:`vgrid_cli.gridsim_cmds`).
"""
