"""LLVM operations numba does not expose, for the sampler kernels: prefetch, fetch-add.

`prefetch(array, i)`: the sampler's phases are chains of dependent random reads
(node -> CSR row -> neighbour -> node map word). The
out-of-order core only overlaps the misses of a few loop iterations, so the hot loops
ask for the line they will need several iterations ahead. Compiles to `llvm.prefetch`
(read, high locality, data cache): a hint that never faults, so an index past the end
of the array is harmless.

`next_chunk(counter)`: atomic fetch-and-add of counter[0]. Parallel loops hand out work
in chunks from a shared counter instead of numba's fixed split (which ignores
set_parallel_chunksize on this numba build), so a thread that starts late, or is
descheduled on a busy machine, leaves its share to the others instead of holding up
the whole loop. Numba/llvmlite only.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba import njit
from numba.extending import intrinsic

# llvm.prefetch(ptr, rw, locality, cache type): read, keep in all cache levels, data.
_READ, _HIGH_LOCALITY, _DATA_CACHE = 0, 3, 1


def _prefetch_codegen(index_types):
    def codegen(context, builder, sig, args):
        array_type = sig.args[0]
        array_value = context.make_array(array_type)(context, builder, args[0])
        indices = [context.cast(builder, value, from_type, types.intp)
                   for value, from_type in zip(args[1:], index_types)]
        pointer = cgutils.get_item_pointer(context, builder, array_type, array_value,
                                           indices, wraparound=False)
        # One declaration per module serves every element type: pass a byte pointer.
        pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        int32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [pointer.type, int32, int32, int32])
        function = cgutils.get_or_insert_function(builder.module, function_type,
                                                  "llvm.prefetch.p0")
        builder.call(function, [pointer, int32(_READ), int32(_HIGH_LOCALITY),
                                int32(_DATA_CACHE)])
        return context.get_dummy_value()
    return codegen


@intrinsic
def prefetch(typingctx, array, index):
    """Hint that array[index] of a 1-D array will be read soon."""
    if not (isinstance(array, types.Array) and array.ndim == 1
            and isinstance(index, types.Integer)):
        return None
    return types.void(array, index), _prefetch_codegen([index])


@intrinsic
def _fetch_add(typingctx, counter, increment):
    if not (isinstance(counter, types.Array) and counter.ndim == 1
            and counter.dtype == types.int64 and isinstance(increment, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        array_type = sig.args[0]
        array_value = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array_value,
                                           [context.get_constant(types.intp, 0)],
                                           wraparound=False)
        value = context.cast(builder, args[1], sig.args[1], types.int64)
        return builder.atomic_rmw("add", pointer, value, "monotonic")

    return types.int64(counter, increment), codegen


@njit(inline="always", cache=True)
def next_chunk(counter):
    """Claim the next chunk index: atomically counter[0] += 1, returning the old value."""
    return _fetch_add(counter, 1)
