"""gnnsys/allocator.py: a training process reuses the memory its last step freed instead
of page-faulting it in again, unless the user says otherwise."""
import os
import subprocess
import sys

import pytest

from gnnsys import allocator

# A step's pattern: allocate, fill and free a 64 MB tensor (over glibc's largest mmap
# threshold, 32 MB), 40 times; count the page faults of the last 10. (torch, not numpy:
# numpy asks for huge pages on large arrays, which hides the faults on a THP-madvise
# kernel.) The first steps grow the heap until the freed blocks fit the next requests.
STEADY_STATE_FAULTS = """
import resource
import torch
from gnnsys.allocator import keep_freed_memory
policy = keep_freed_memory()
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(40):
    if step == 30:
        before = faults()
    block = torch.empty(64 << 20, dtype=torch.uint8)
    block.fill_(1)
    del block
print(policy, faults() - before)
"""


def steady_state(env_update):
    env = {k: v for k, v in os.environ.items() if k != "GNNSYS_MALLOC"}
    out = subprocess.run([sys.executable, "-c", STEADY_STATE_FAULTS], check=True,
                         env={**env, **env_update}, capture_output=True, text=True).stdout
    policy, faults = out.split()
    return policy, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_freed_memory_is_reused_without_page_faults():
    policy, faults = steady_state({})
    assert policy == "keep" and faults < 1000, faults        # 10 x 16,384 pages of 4 KiB
    policy, faults = steady_state({"GNNSYS_MALLOC": "system"})
    assert policy == "system" and faults > 100_000, faults
    policy, faults = steady_state({"MALLOC_MMAP_MAX_": "65536"})   # the user's own tuning
    assert policy == "system" and faults > 100_000, faults


def test_an_unknown_policy_is_named(monkeypatch):
    monkeypatch.setenv("GNNSYS_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match="GNNSYS_MALLOC='jemalloc'; use one of keep, system"):
        allocator._apply()
