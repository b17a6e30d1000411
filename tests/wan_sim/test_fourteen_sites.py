"""Sana against Max-Share on the 14-site, 12-query workload (docs/wan.md, section 7.3)."""

from __future__ import annotations

import pytest

from wan_sim.scenario import parse_scenario
from wan_sim.simulate import simulate
from wan_sim.workloads import fourteen_site_scenario


def _throughput(policy: str, queries: int, **scales) -> float:
    return simulate(parse_scenario(fourteen_site_scenario(queries, **scales)), policy).summary()["throughput_rps"]


@pytest.mark.parametrize("bandwidth_scale", [0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 100.0])
def test_sana_delivers_at_least_what_max_share_does_for_every_query_count(bandwidth_scale):
    behind = [(queries, sana, max_share) for queries in range(1, 13)
              for sana, max_share in [(_throughput("sana", queries, bandwidth_scale=bandwidth_scale),
                                       _throughput("max-share", queries, bandwidth_scale=bandwidth_scale))]
              if sana < max_share - 1e-6]
    assert behind == []


def test_where_a_shared_vertexs_site_is_the_bottleneck_max_share_loses_and_sana_does_not():
    """Virginia, which runs the first query's shared parse and filters, keeps a tenth of its egress."""
    scales = {"bandwidth_scale": 0.3, "thin_egress": ("virginia", 0.1)}
    sana, max_share = _throughput("sana", 12, **scales), _throughput("max-share", 12, **scales)
    demand = simulate(parse_scenario(fourteen_site_scenario(12, **scales)), "sana").summary()["demand_rps"]
    assert max_share <= 0.8 * sana
    assert sana == pytest.approx(demand)


@pytest.mark.parametrize("queries", [6, 10])
def test_re_placing_a_query_whose_task_others_share_gives_its_copy_a_name_of_its_own(queries):
    """California's egress thin, re-placement at full utilization: a query is re-planned while a task of its
    first plan still runs for later queries. Its copy used to take the same name and overwrite the shared
    task (the running set then lost track of it). Every running task is indexed once, under its signature."""
    document = fourteen_site_scenario(queries, bandwidth_scale=0.2, thin_egress=("california", 0.1))
    document["wan"]["replacement"] = {"utilization": 1.0, "check_every_s": 10}
    result = simulate(parse_scenario(document), "sana")
    assert result.replacements, "the case re-places"
    deployment = result.deployment
    indexed = sorted(task_id for ids in deployment._by_signature.values() for task_id in ids)
    assert indexed == sorted(deployment.tasks)
    assert any("~" in task_id for task_id in deployment.tasks), "a copy named apart from the task it copies"
    assert all(deployment.tasks[task_id].signature == signature
               for signature, ids in deployment._by_signature.items() for task_id in ids)
