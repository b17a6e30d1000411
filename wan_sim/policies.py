"""The sharing policies compared in docs/wan.md.

| policy | sharing | bandwidth checks | placement |
|---|---|---|---|
| default | none (each query reads its sources itself) | - | WAN-unaware (first input's site) |
| net | none | - | WAN-aware (Algorithm 2) |
| mqo | IN-OP and IN, routers | no | WAN-unaware |
| sana | IN-OP and IN, routers; a query planned privately when that delivers 1.05x more | Algorithm 1, weighed against taking every share | WAN-aware |
| no-share | as net (the 7.2 baseline name) | - | WAN-aware |
| strict-share | IN-OP only, no routers | Algorithm 1 | WAN-aware |
| max-share | IN-OP and IN, routers | no | WAN-aware |
| sana-printed | as sana | Algorithm 1 as printed (refusals never weighed) | WAN-aware |
"""

from __future__ import annotations

from planning.model import MAX_SHARE, NET, SANA, PlanningOptions
from wan_sim.exceptions import PolicyUnknown

POLICIES: dict[str, PlanningOptions] = {
    "default": PlanningOptions(share_sources=False, share_inop=False, share_in=False, bandwidth_checks=False, wan_placement=False),
    "net": NET,
    "mqo": PlanningOptions(bandwidth_checks=False, wan_placement=False),
    "sana": SANA,
    "no-share": NET,
    "strict-share": PlanningOptions(share_in=False),
    "max-share": MAX_SHARE,
    "sana-printed": PlanningOptions(weigh_refusals=False),
}


def policy_options(name: str) -> PlanningOptions:
    """The planning switches of a named policy.

    >>> policy_options("strict-share").share_in, policy_options("sana").bandwidth_checks
    (False, True)
    """
    try:
        return POLICIES[name.lower()]
    except KeyError:
        raise PolicyUnknown(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}", culprit={"policy": name}) from None
