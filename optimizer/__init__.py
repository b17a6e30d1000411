"""Sharing analysis: IN-OP and IN opportunities (Sana 4.1-4.2) and Algorithm 1's bandwidth checks.

:func:`optimizer.planner.plan_query` plans a new query against the running
set; without a WAN configuration the manager does not call it and shares every
equivalent task (the optimum).
"""
