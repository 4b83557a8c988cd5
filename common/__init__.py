"""What samplers, partition and gnnsys all use, in modules that import neither torch nor
gnnsys: `files` (temp files, atomic writes, file modes, checksums), `memory` (the memory
a process may still take), `rng` (the kernels' counter-based random streams),
`kernel_cache` (numba's on-disk cache stamped with every source a kernel inlines).

Importing the package loads nothing: `files` and `memory` do not pull in numba.
"""
