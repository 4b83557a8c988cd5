"""numpy 2.5 removed `np.row_stack` (an alias of `np.vstack`, deprecated since 2.0), and
numba-cuda 0.30 still registers an overload for it while loading its typing registries:
without the alias no numba.cuda kernel compiles (found on the first real GPU run,
H200, numpy 2.5.2, numba-cuda 0.30.4). The alias is restored where it is missing.
Imported first by samplers/__init__.py, which every kernel module imports."""
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
