"""Copies from global to shared memory that fly without registers (PTX cp.async, sm_80 on), with
one source for the GPU and the CUDA simulator.

A kernel that stages operands through registers holds every load in flight in a register until
it stores it, so the loads it can keep in flight are few, and each costs a load, a store and
their index arithmetic. `copy_async(width)` starts a copy of `width` floats (4 or 16 bytes) that
lands in shared memory by itself; `commit()` closes the group of copies a thread has started,
and `wait(n)` returns once at most n of its groups are still in flight. As with any write to
shared memory, other threads may read a copy only after a barrier that follows the wait.

A kernel that copies the same pattern chunk after chunk can take its addresses once:
`shared_address` and `global_address` give an element's address in its state space (UNIT more a
float further on), and `copy_at(width)` copies `width` whole floats between two such addresses,
with no index arithmetic at all.

In the simulator a copy is done when it starts, so commit and wait have nothing to do.
"""
import functools

from numba import config

ZERO = 0.0

if config.ENABLE_CUDASIM:

    @functools.cache
    def copy_async(width):
        def copy(dst, d0, src, s0, n):
            """dst[d0 + k] = src.flat[s0 + k] for k < n, 0 for n <= k < width."""
            i, j = divmod(int(s0), src.shape[1])
            for k in range(width):
                dst[d0 + k] = src[i, j + k] if k < n else ZERO
        return copy

    def commit():
        pass

    @functools.cache
    def wait(n):
        def wait_group():
            pass
        return wait_group

    UNIT = 1  # the simulator's addresses are element indices

    def shared_address(x, i):
        return i

    global_address = shared_address

    @functools.cache
    def copy_at(width):
        def copy(dst, d, src, s):
            """copy_async(width)(dst, d, src, s, width), at shared_address and global_address's addresses."""
            i, j = divmod(int(s), src.shape[1])
            for k in range(width):
                dst[int(d) + k] = src[i, j + k]
        return copy

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def _asm(builder, text, args=(), constraints=""):
        fty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
        builder.call(ir.InlineAsm(fty, text, constraints, side_effect=True), list(args))

    @functools.cache
    def copy_async(width):
        """Start dst[d0 + k] = src.flat[s0 + k] for k < n, zeros for n <= k < width (src a
        C-contiguous float32 array in global memory, dst a shared one; n from 0 to width).
        Both addresses must be 4 * width bytes aligned. n = 0 reads nothing."""
        assert width in (1, 4)
        # 16-byte copies may skip L1 (.cg): the staged values are read from shared memory only
        op = "cp.async.cg.shared.global" if width == 4 else "cp.async.ca.shared.global"

        @intrinsic
        def copy(typingctx, dst, d0, src, s0, n):
            if dst.dtype != types.float32 or src.dtype != types.float32:
                return None
            sig = types.void(dst, d0, src, s0, n)

            def codegen(context, builder, signature, args):
                dst_ty, d0_ty, src_ty, s0_ty, n_ty = signature.args
                i64, i32 = ir.IntType(64), ir.IntType(32)
                dptr = context.make_array(dst_ty)(context, builder, args[0]).data
                sptr = context.make_array(src_ty)(context, builder, args[2]).data
                d = builder.gep(dptr, [context.cast(builder, args[1], d0_ty, types.int64)])
                s = builder.gep(sptr, [context.cast(builder, args[3], s0_ty, types.int64)])
                nbytes = builder.mul(builder.trunc(context.cast(builder, args[4], n_ty, types.int64), i32),
                                     ir.Constant(i32, 4))
                _asm(builder,
                     "{ .reg .u64 sd, gs; cvta.to.shared.u64 sd, $0; cvta.to.global.u64 gs, $1; "
                     f"{op} [sd], [gs], {4 * width}, $2; }}",
                     [builder.ptrtoint(d, i64), builder.ptrtoint(s, i64), nbytes], "l,l,r,~{memory}")
                return context.get_dummy_value()

            return sig, codegen

        return copy

    @intrinsic
    def commit(typingctx):
        def codegen(context, builder, signature, args):
            _asm(builder, "cp.async.commit_group;", constraints="~{memory}")
            return context.get_dummy_value()
        return types.void(), codegen

    @functools.cache
    def wait(n):
        """The intrinsic that waits until at most n of this thread's groups are in flight."""
        @intrinsic
        def wait_group(typingctx):
            def codegen(context, builder, signature, args):
                _asm(builder, f"cp.async.wait_group {int(n)};", constraints="~{memory}")
                return context.get_dummy_value()
            return types.void(), codegen

        return wait_group

    UNIT = 4  # bytes a float

    def _address(space):
        @intrinsic
        def address(typingctx, x, i):
            if x.dtype != types.float32:
                return None

            def codegen(context, builder, signature, args):
                x_ty, i_ty = signature.args
                i64 = ir.IntType(64)
                ptr = context.make_array(x_ty)(context, builder, args[0]).data
                p = builder.ptrtoint(builder.gep(ptr, [context.cast(builder, args[1], i_ty, types.int64)]), i64)
                return builder.call(ir.InlineAsm(ir.FunctionType(i64, [i64]), f"cvta.to.{space}.u64 $0, $1;", "=l,l"),
                                    [p])

            return types.uint64(x, i), codegen

        return address

    # the address of x.flat[i] (a float32 array) in its state space, as cp.async takes it: a
    # shared array's (32 bits significant), a global one's
    shared_address, global_address = _address("shared"), _address("global")

    @functools.cache
    def copy_at(width):
        """Start a copy of `width` floats from the global address s to the shared address d
        (shared_address, global_address; both 4 * width bytes aligned). dst and src are not read: they name the
        arrays, as the simulator's copy needs them."""
        assert width in (1, 4)
        op = "cp.async.cg.shared.global" if width == 4 else "cp.async.ca.shared.global"

        @intrinsic
        def copy(typingctx, dst, d, src, s):
            sig = types.void(dst, d, src, s)

            def codegen(context, builder, signature, args):
                d32 = builder.trunc(context.cast(builder, args[1], signature.args[1], types.uint64), ir.IntType(32))
                s64 = context.cast(builder, args[3], signature.args[3], types.uint64)
                _asm(builder, f"{op} [$0], [$1], {4 * width};", [d32, s64], "r,l,~{memory}")
                return context.get_dummy_value()

            return sig, codegen

        return copy
