"""The WAN model the service plans with: sites, links, the monitor of spare bandwidth, the flow model.

- :mod:`wan.topology`: the WAN configuration (sites, links, where each stream enters);
- :mod:`wan.monitor`: spare bandwidth and utilization per link, read by the optimizer and the scheduler;
- :mod:`wan.flow`: the max-min fair flow model with backpressure (throughput, WAN Mbps, latency),
  with which the optimizer weighs contention and the simulator evaluates plans;
- :mod:`wan.exceptions`: a configuration or a site that breaks a rule of docs/wan.md.

A ground floor: it imports only :mod:`sana` and never Spark. The simulator that drives it
(:mod:`wan_sim`) sits at the top, beside the benchmarks.
"""
