"""Sites, links, the WAN monitor and the flow model comparing sharing policies.

Not built yet (issue 6).
"""
