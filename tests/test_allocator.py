"""gnnsys/allocator.py: a training process reuses the memory its last step freed instead
of page-faulting it in again, unless the user says otherwise."""
import os
import subprocess
import sys

import pytest

from gnnsys import allocator

# A step's pattern (gnnsys.testing.steady_state_faults): allocate, fill and free a 128 MB
# tensor (over glibc's largest mmap threshold, 32 MB, and over a thread arena's 64 MB
# heaps), 40 times; count the page faults of the last 10, in the main thread and in a
# thread it started.
IN_MAIN_AND_A_THREAD = """
import threading
from gnnsys.allocator import keep_freed_memory
from gnnsys.testing import steady_state_faults
policy = keep_freed_memory()
in_thread = []
thread = threading.Thread(target=lambda: in_thread.append(steady_state_faults()))
thread.start(); thread.join()
print(policy, steady_state_faults(), in_thread[0])
"""


def steady_state(env_update):
    env = {k: v for k, v in os.environ.items() if k not in ("GNNSYS_MALLOC", "MALLOC_ARENA_MAX")}
    out = subprocess.run([sys.executable, "-c", IN_MAIN_AND_A_THREAD], check=True,
                         env={**env, **env_update}, capture_output=True, text=True).stdout
    policy, main, thread = out.split()
    return policy, int(main), int(thread)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_freed_memory_is_reused_without_page_faults():
    # 10 steps x 32,768 pages of 4 KiB, in the main thread and in a thread it started
    policy, main, thread = steady_state({})
    assert policy == "keep" and main < 1000 and thread < 1000, (main, thread)
    policy, main, thread = steady_state({"GNNSYS_MALLOC": "system"})
    assert policy == "system" and main > 200_000 and thread > 200_000, (main, thread)
    policy, main, thread = steady_state({"MALLOC_MMAP_MAX_": "65536"})   # the user's own
    assert policy == "system" and main > 200_000, main
    # the user's arena count is theirs: with several arenas a thread's big blocks are mmapped
    policy, main, thread = steady_state({"MALLOC_ARENA_MAX": "8"})
    assert policy == "keep" and main < 1000 and thread > 200_000, (main, thread)


def test_workers_start_with_one_arena_unless_told_otherwise(monkeypatch):
    for name in ("GNNSYS_MALLOC", "MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    assert allocator.worker_environment() == {"MALLOC_ARENA_MAX": "1"}
    monkeypatch.setenv("GNNSYS_MALLOC", "system")
    assert allocator.worker_environment() == {}
    monkeypatch.setenv("GNNSYS_MALLOC", "keep")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.worker_environment() == {}


def test_an_unknown_policy_is_named(monkeypatch):
    monkeypatch.setenv("GNNSYS_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match="GNNSYS_MALLOC='jemalloc'; use one of keep, system"):
        allocator._apply()
