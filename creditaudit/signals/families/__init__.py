"""The built-in credit families, one module each (VICT in its own folder).

Each module exposes a factory published in the ``creditaudit.families`` entry-point group
(``pyproject.toml``); third-party families register the same way (see :mod:`creditaudit.plugins`).
"""
