"""Placement of running tasks on sites and the cut of running DAGs into fragments.

Today: the locality default (a task runs where its inputs are) and fragment
assignment for the tasks a merge creates. The WAN-aware placement of Sana's
Algorithm 2 is issue 6 and not built yet.
"""
