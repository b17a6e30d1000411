"""Sana: shared streaming dataflows.

This package holds what every other package needs: the root exception and the
settings object. The system itself lives in the top-level packages ``manager``,
``optimizer``, ``scheduler``, ``runtime``, ``wan_sim`` and ``api``.
"""

#: The one place the version is written: pyproject.toml, the API and the chart read it from here
#: (tests/test_version.py checks the chart and the changelog agree).
__version__ = "0.5.0"
