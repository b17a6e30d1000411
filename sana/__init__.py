"""Sana: shared streaming dataflows.

This package holds what every other package needs: the root exception and the
settings object. The system itself lives in the top-level packages ``manager``,
``optimizer``, ``scheduler``, ``runtime``, ``wan_sim`` and ``api``.
"""

__version__ = "0.1.0"
