"""Placement of running tasks on sites and the cut of running DAGs into fragments.

It speaks the vocabulary of :mod:`planning` and reads the WAN model (:mod:`wan`);
the optimizer calls it, never the other way round.

- :mod:`scheduler.assignment`: the scheduler's stage of a submit (each vertex's
  running task, each new task's site, id and fragment);
- :mod:`scheduler.placement`: Sana's Algorithm 2 (IN-OP, pinned, IN co-location,
  site locality, else the Hourglass cost) and the WAN-unaware default;
- :mod:`scheduler.fragments`: the locality default without a WAN configuration
  and fragment assignment for the tasks a merge creates.
"""
