"""The ``sana`` command line's exit codes (api/cli.py's docstring), shared by its command modules."""

EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
