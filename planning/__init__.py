"""The vocabulary the optimizer and the scheduler share, below both.

- :mod:`planning.model`: a query to plan (:class:`~planning.model.QueryTask`), what already runs
  (:class:`~planning.model.RunningTask`), the options of a planner, the admissions the optimizer
  grants and the plan the scheduler returns (:class:`~planning.model.QueryPlan`);
- :mod:`planning.context`: the bookkeeping of one planning pass (what is mapped where, what the
  plan adds to each link);
- :mod:`planning.exceptions`: a query that is not parents-first.

The optimizer (:mod:`optimizer`, which shares may be taken) calls the scheduler
(:mod:`scheduler`, where each vertex runs); both read the WAN model (:mod:`wan`).
"""
