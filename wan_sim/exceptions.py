"""Errors of the WAN simulator: its scenarios and policies."""

from __future__ import annotations

from wan.exceptions import WanError


class ScenarioInvalid(WanError):
    """A simulator scenario is malformed: unknown task, cycle, a stream to nowhere..."""

    code = "WAN_SCENARIO_INVALID"


class PolicyUnknown(WanError):
    """A sharing policy name is not one of :data:`wan_sim.policies.POLICIES`."""

    code = "WAN_POLICY_UNKNOWN"
