"""Software prefetch for numba kernels: `prefetch(array, i)`, `prefetch2d(array, i, j)`.

The sampler's phases are chains of dependent random reads (node -> CSR row -> neighbour
-> hash slot -> feature row). The out-of-order core only overlaps the misses of a few
loop iterations, so the hot loops ask for the line they will need several iterations
ahead. Compiles to LLVM's `llvm.prefetch` (read, high locality, data cache): a hint
that never faults, so an index past the end of the array is harmless. Numba/llvmlite only.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
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
def prefetch2d(typingctx, array, row, column):
    """Hint that array[row, column] of a 2-D array will be read soon."""
    if not (isinstance(array, types.Array) and array.ndim == 2
            and isinstance(row, types.Integer) and isinstance(column, types.Integer)):
        return None
    return types.void(array, row, column), _prefetch_codegen([row, column])
