"""How fast a warp's shared-memory loads return, by width and by which lanes share an address:
the figure behind tf's matrix kernels' tiles (docs/tf.md, "Matrix kernels").

Each block of 1,024 threads (one per multiprocessor) reads a 32 KiB shared array over and over,
a lane always from the same place (plus a step that changes each round, so no load repeats the
last), and adds what it read into a register. The time of a round of all the warps' loads, over
the number of warps, is the multiprocessor's time for one warp's load. Patterns (lane L reads):
distinct (its own address), pairs ^1 (L and L ^ 1 the same), pairs ^2 (L and L ^ 2), quads (L .. L ^ 3),
and one address for the whole warp.

    python3 tools/experiments/shared_probe.py            (a GPU; not under the simulator)
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

THREADS, ROUNDS, FLOATS = 1024, 4096, 8192
UNROLL = 8


def pattern(name, width):
    """The float each lane reads first (a multiple of width)."""
    lanes = np.arange(32)
    group = {"distinct": lanes, "pairs^1": lanes & ~1, "pairs^2": lanes & ~2, "quads": lanes & ~3,
             "uniform": lanes * 0}[name]
    return (group * width).astype(np.int64)


def volatile_load(width):
    """The first of `width` floats read by one volatile shared load (the others are read and
    dropped: a volatile load stays, and one add a load keeps the count of other instructions
    under the loads' own)."""
    regs = ",".join(f"r{k}" for k in range(width))
    vec = f".v{width}" if width > 1 else ""
    text = (f"{{ .reg .f32 {regs}; .reg .u64 a; cvta.to.shared.u64 a, $1; "
            f"ld.volatile.shared{vec}.f32 {{{regs}}}, [a]; mov.f32 $0, r0; }}" if width > 1 else
            "{ .reg .u64 a; cvta.to.shared.u64 a, $1; ld.volatile.shared.f32 $0, [a]; }")

    @intrinsic
    def load(typingctx, src, s0):
        def codegen(context, builder, signature, args):
            src_ty, s0_ty = signature.args
            ptr = context.make_array(src_ty)(context, builder, args[0]).data
            p = builder.gep(ptr, [context.cast(builder, args[1], s0_ty, types.int64)])
            fty = ir.FunctionType(ir.FloatType(), [ir.IntType(64)])
            return builder.call(ir.InlineAsm(fty, text, "=f,l,~{memory}", side_effect=True),
                                [builder.ptrtoint(p, ir.IntType(64))])
        return types.float32(src, s0), codegen

    return load


def make(width):
    load = volatile_load(width)

    @cuda.jit
    def probe(first, out, rounds):
        shared = cuda.shared.array(FLOATS, np.float32, alignment=16)
        t = cuda.threadIdx.x
        for k in range(t, FLOATS, THREADS):
            shared[k] = np.float32(k % 7)
        cuda.syncthreads()
        acc = np.float32(0.0)
        base = np.uint64(first[t % 32] + (t // 32) * 128)  # each warp its own 512 bytes
        for r in range(0, rounds, UNROLL):
            for u in range(UNROLL):
                acc += load(shared, base + np.uint64((u % 4) * 1024))
        out[cuda.blockIdx.x * THREADS + t] = acc

    return probe


def main():
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    out = cuda.device_array(sms * THREADS, np.float32)
    print(f"{'width':>5} {'pattern':>9} {'ns a warp load per SM':>22} {'relative to 4-byte distinct':>28}")
    base_ns = None
    for width in (1, 2, 4):
        kernel = make(width)
        for name in ("distinct", "pairs^1", "pairs^2", "quads", "uniform"):
            first = cuda.to_device(pattern(name, width))
            kernel[sms, THREADS](first, out, 64)
            cuda.synchronize()
            best = np.inf
            for _ in range(5):
                t = time.perf_counter()
                kernel[sms, THREADS](first, out, ROUNDS)
                cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            ns = best * 1e9 / (ROUNDS * THREADS // 32)
            base_ns = base_ns or ns
            print(f"{width:>5} {name:>9} {ns:>22.3f} {ns / base_ns:>28.2f}", flush=True)


if __name__ == "__main__":
    main()
