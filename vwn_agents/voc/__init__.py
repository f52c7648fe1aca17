"""Virtual Organization Clusters (seed 003, Murphy and Goasguen; docs/vwn.md, "Virtual
Organization Clusters").

``pool`` (per-VO pools of VWNs and the driver that boots them), ``policies`` (the watchdog's
sizing policies, selected by name: ``greedy`` is the paper's, ``damped`` ours), ``watchdog``
(the loop body run once per interval, the same code live and simulated), ``sim`` (the simulated
site and the seed 003 workloads of Figures 7, 10 and 11), ``live`` (the cgroup driver and the CE
agent's ``scheduler = "voc"``).
"""
