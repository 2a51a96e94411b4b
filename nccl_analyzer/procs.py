"""Linux /proc reading shared by launch and reproduce: which processes exist, their state, parent and group."""
from __future__ import annotations

import os


def all_pids() -> list[int]:
    """Every pid in /proc (empty where there is no /proc)."""
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after ``comm``: [state, ppid, pgrp, session, ...]; None if it is gone.

    ``comm`` may hold spaces and parentheses, so the line is split after its last ')'.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode(errors="replace")
    except OSError:
        return None
    return data[data.rfind(")") + 2:].split()
