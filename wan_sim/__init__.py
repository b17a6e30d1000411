"""The WAN simulator and emulator: scenarios, sharing policies and the runs that compare them (docs/wan.md).

- :mod:`wan_sim.scenario`: a scenario file (a WAN, sources and queries arriving over time);
- :mod:`wan_sim.policies`: the sharing policies compared (Sana, IN-OP only, none, ...);
- :mod:`wan_sim.simulate`: runs the optimizer and scheduler epoch by epoch on the WAN model;
- :mod:`wan_sim.workloads`: the 14-site, 12-query workload of the experiments;
- :mod:`wan_sim.cli`: ``python -m wan_sim SCENARIO --policy P`` (also ``sana wan-sim``);
- :mod:`wan_sim.emulation`: the emulated WAN, a shaping Kafka proxy per link that the real runtime reads
  other sites' streams through (``benchmarks.wan_emulation`` runs the policies on it).

A top floor, like ``benchmarks``: it uses the service's packages and nothing in the
service imports it. Nothing here imports Spark.
"""
