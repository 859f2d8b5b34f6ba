"""The ``zuul`` command line client's commands (zuul/client/commands.py)."""
