"""The numba cache never serves a kernel compiled from an older version of a file it
inlines (common/kernel_cache.py). Without the wider stamp, numba checks only the
kernel's own file, and a bug planted in common/rng.py passed the sampler tests."""
import os
import subprocess
import sys
import textwrap

from gnnsys.fullgraph import quantize_fast
from samplers import SOURCES_DIGEST, _hop_sampling
from common.kernel_cache import KernelSourcesLocator

KERNEL = """
import sys
from numba import njit
from common.kernel_cache import depends_on_samplers
depends_on_samplers(__file__, sys.argv[1])
sys.path.insert(0, {folder!r})
from helper import value

@njit(cache=True)
def kernel():
    return value()

print(kernel())
"""


def run_kernel(folder, cache_dir):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, str(folder / "kernel.py"), str(folder / "helper.py")],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_edit_to_an_inlined_helper_recompiles_the_kernel(tmp_path):
    (tmp_path / "kernel.py").write_text(textwrap.dedent(KERNEL.format(folder=str(tmp_path))))
    helper = tmp_path / "helper.py"
    helper.write_text("from numba import njit\n\n@njit(inline='always')\n"
                      "def value():\n    return 1\n")
    cache = tmp_path / "cache"
    assert run_kernel(tmp_path, cache) == "1"
    assert any(cache.rglob("kernel.kernel-*.nbi")), "the kernel was not cached at all"
    helper.write_text(helper.read_text().replace("return 1", "return 2"))
    assert run_kernel(tmp_path, cache) == "2", "served from a stale cache"


def test_package_kernels_carry_the_wider_stamp():
    for kernel in (_hop_sampling.fill_hop, quantize_fast._encode):
        locator = kernel._cache._impl.locator
        assert isinstance(locator, KernelSourcesLocator)
        assert locator.get_source_stamp()[1].startswith(SOURCES_DIGEST)
