"""A benchmark process's own memory figure."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_mib() -> float:
    """This process's peak resident memory in MiB. Linux's VmHWM starts afresh with the program; the
    rusage maximum (elsewhere) would include the parent's size when it was forked."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
