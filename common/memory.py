"""The memory a process may still take, read from the OS: what a step or a partitioner
checks its estimate against before it starts. Depends on the standard library only."""
from __future__ import annotations


def available_memory_bytes() -> int:
    """MemAvailable (free + reclaimable cache) on Linux; unlimited where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62
