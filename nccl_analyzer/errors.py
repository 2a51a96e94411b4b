"""Error types; cli.py alone maps them to exit codes."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    CLEAN = 0
    FAILURE_FOUND = 1
    USAGE = 2
    INTERNAL = 3
    REPRODUCE_FAILED = 4
    INTERRUPTED = 130


class AnalyzerError(Exception):
    """An error the user can act on; the message says what to do."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.path = path
        self.line = line

    def __str__(self) -> str:
        msg = super().__str__()
        if self.path and self.line:
            return f"{self.path}:{self.line}: {msg}"
        if self.path:
            return f"{self.path}: {msg}"
        return msg


class InputError(AnalyzerError):
    """Missing or unreadable input."""


class RuleError(AnalyzerError):
    """A rule file that does not validate."""


class ReproduceError(AnalyzerError):
    """The reproduction could not run at all."""

    exit_code = ExitCode.REPRODUCE_FAILED
