"""Vector loads from shared memory, with one source for the GPU and the CUDA simulator.

NVVM merges neighbouring float32 loads from a Numba shared array only where it can prove them
aligned. With Numba's default 4-byte alignment it merges none (four `ld.shared.f32` in the PTX
where one `ld.shared.v4.f32` would do). With the array declared 16-byte aligned, it merges some
loads across a thread's outputs, but not the 4-step runs along s of tf's forward and
input-gradient kernels: tf_fc's T_WIDE kernel has no `ld.shared.v4` with plain indexing, and 8
with this. A matrix kernel that reads 2 or 4 neighbours a step otherwise spends its time issuing
loads. `vector_load(width,
stride)` gives a device function that reads `width` neighbours with one aligned load and scatters
them into a local (register) array. The caller promises the alignment: the shared array is declared
with `alignment=SHARED_ALIGN` and the first index is a multiple of `width`.
"""
import functools

from numba import config

if config.ENABLE_CUDASIM:
    SHARED_ALIGN = None  # the simulator refuses an alignment (its numpy arrays are aligned anyway)

    @functools.cache
    def vector_load(width, stride):
        def load(dst, d0, src, s0):
            for k in range(width):
                dst[d0 + k * stride] = src[s0 + k]
        return load

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    SHARED_ALIGN = 16  # bytes: four float32, the widest load

    @functools.cache
    def vector_load(width, stride):
        """dst[d0 + k * stride] = src[s0 + k] for k < width, src read by one load of width floats
        (two loads of 4 for 8)."""
        assert width in (1, 2, 4, 8)
        part = min(width, 4)

        @intrinsic
        def load(typingctx, dst, d0, src, s0):
            if dst.dtype != types.float32 or src.dtype != types.float32:
                return None
            sig = types.void(dst, d0, src, s0)

            def codegen(context, builder, signature, args):
                dst_ty, d0_ty, src_ty, s0_ty = signature.args
                i64 = ir.IntType(64)
                dptr = context.make_array(dst_ty)(context, builder, args[0]).data
                sptr = context.make_array(src_ty)(context, builder, args[2]).data
                d0v = context.cast(builder, args[1], d0_ty, types.int64)
                p = builder.gep(sptr, [context.cast(builder, args[3], s0_ty, types.int64)])
                vty = ir.VectorType(ir.FloatType(), part)
                for first in range(0, width, part):
                    pk = builder.gep(p, [ir.Constant(i64, first)])
                    v = builder.load(builder.bitcast(pk, vty.as_pointer(p.type.addrspace)), align=4 * part)
                    for k in range(part):
                        e = builder.extract_element(v, ir.Constant(ir.IntType(32), k))
                        builder.store(e, builder.gep(dptr, [builder.add(d0v, ir.Constant(i64, (first + k) * stride))]))
                return context.get_dummy_value()

            return sig, codegen

        return load
