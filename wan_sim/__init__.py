"""Sites, links, the WAN monitor and the flow model comparing sharing policies (docs/wan.md).

- :mod:`wan_sim.topology`: the WAN configuration (sites, links, stream origins);
- :mod:`wan_sim.monitor`: spare bandwidth and utilization per link, read by the optimizer and the scheduler;
- :mod:`wan_sim.flow`: max-min fair flow model with backpressure, throughput, WAN Mbps, latency;
- :mod:`wan_sim.scenario`, :mod:`wan_sim.policies`, :mod:`wan_sim.simulate`: scenarios, policies, runs;
- :mod:`wan_sim.workloads`: the 14-site, 12-query workload of the experiments.

Nothing here imports Spark.
"""
