"""The HTTP API (``api.app:app``), the ``sana`` command line and the launcher of ``sana up``."""
