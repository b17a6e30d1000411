"""Sharing analysis (IN-OP and IN opportunities, Sana's Algorithm 1).

Not built yet (issue 6). Today the manager shares every equivalent task, which
is exactly the optimum when no WAN configuration limits bandwidth.
"""
