"""Errors the CLI reports to the operator, and the exit codes they map to."""

from __future__ import annotations


class CliError(Exception):
    """A problem worth one clear line and a non-zero exit."""

    exit_code = 2


class DamageFound(CliError):
    """``dump --verify`` found bytes that are not valid records."""

    exit_code = 1
