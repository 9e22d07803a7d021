"""How fast one ordered chain runs on a GPU: ns per step of kernels.staged_sum and staged_dot over
768 values staged in shared memory (one thread, the chain alone), and the SASS of their loops.

    PYTHONPATH=. python3 tools/experiments/chain_probe.py
"""
import re
import time

import numpy as np
from numba import cuda

from tf_numba import kernels as K

N = 768
U1 = np.uint64(1)


def make(dot):
    @cuda.jit
    def staged(inp, out, reps):
        buf = cuda.shared.array(1024, np.float32)
        t = cuda.threadIdx.x
        for k in range(t, N, cuda.blockDim.x):
            buf[k] = inp[k]
        cuda.syncthreads()
        if t == 0:
            total = np.float32(0)
            for _ in range(reps):
                if dot:
                    total = K.staged_dot(total, buf, np.uint64(0), U1, buf, np.uint64(0), U1, N, True)
                else:
                    total = K.staged_sum(total, buf, np.uint64(0), N)
            out[0] = total
    return staged


def main(reps=2000, launches=5):
    inp = cuda.to_device(np.random.default_rng(0).standard_normal(N).astype(np.float32))
    out = cuda.device_array(1, np.float32)
    for dot in (False, True):
        f = make(dot)
        f[1, 32](inp, out, reps)
        cuda.synchronize()
        t = time.perf_counter()
        for _ in range(launches):
            f[1, 32](inp, out, reps)
        cuda.synchronize()
        s = (time.perf_counter() - t) / launches
        print(f"{'staged_dot' if dot else 'staged_sum'}: {s / (N * reps) * 1e9:.3f} ns/step")
        sass = f.inspect_sass()
        sass = sass if isinstance(sass, str) else next(iter(sass.values()))
        lines = [line for line in sass.splitlines() if re.search(r"FADD|FFMA|LDS|BRA", line)]
        first = next((i for i, line in enumerate(lines) if "LDS" in line), 0)
        print("\n".join(lines[first:first + 40]))


if __name__ == "__main__":
    main()
