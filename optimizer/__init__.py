"""Sharing analysis: IN-OP and IN opportunities (Sana 4.1-4.2) and Algorithm 1's bandwidth checks.

:func:`optimizer.planner.admit_shares` is the optimizer's stage of a submit:
which shares each vertex of a new query may take, for the scheduler to place
it from. Without a WAN configuration the manager does not call it and shares
every equivalent task (the optimum).
"""
