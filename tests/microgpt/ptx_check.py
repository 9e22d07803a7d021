"""Compiles the fast engine's kernels for sm_90 on a machine with the CUDA toolkit but no GPU.

The simulator runs kernels as Python and never types them, so a kernel it runs can still fail
to compile for the GPU. This types and compiles train_kernel and generate_kernel with NVVM, then
asks ptxas for their registers (at most 128 for fast.THREADS = 512) and static shared memory
(at most fast.STATIC_SHARED_BYTES). Numba looks for a device, NVRTC and libdevice through the
driver; without a driver those three lookups are answered here.

    CUDA_HOME=/usr/local/cuda python tests/microgpt/ptx_check.py
"""
import os
import re
import subprocess
import sys
import tempfile
import types as pytypes
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numba.cuda.cudadrv.libs as libs  # noqa: E402
import numba.cuda.cudadrv.nvrtc as nvrtc  # noqa: E402
import numba.cuda.cudadrv.nvvm as nvvm  # noqa: E402
import numba.cuda.dispatcher as dispatcher  # noqa: E402
from numba import cuda, types  # noqa: E402

from microgpt_numba import fast  # noqa: E402

CC = (9, 0)
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
nvrtc.get_supported_ccs = lambda: (CC,)
dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=CC)
nvvm.get_libdevice = libs.get_libdevice = lambda: str(CUDA_HOME / "nvvm" / "libdevice" / "libdevice.10.bc")

F1, F2 = types.Array(types.float32, 1, "C"), types.Array(types.float32, 2, "C")
I1, I2 = types.Array(types.int32, 1, "C"), types.Array(types.int32, 2, "C")
B, I64, F32 = types.boolean, types.int64, types.float32
SIGNATURES = {  # the argument types fast.train and fast.generate launch with
    "train_kernel": (F1, F1, F1, F1, B, I2, I1, I2, I2, I1, I64, I1, I1, I64, F2, I64, F1),
    "generate_kernel": (F1, F1, F1, B, I2, I2, I2, I1, I64, I64, F32, F1, I64, I2, I1),
}


def main():
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, signature in SIGNATURES.items():
            ptx, _ = cuda.compile_ptx(getattr(fast, name).py_func, signature, cc=CC)
            path = Path(tmp) / f"{name}.ptx"
            path.write_text(ptx)
            for cap in (None, fast.KERNEL_OPTIONS.get("max_registers", 128)):
                args = [str(CUDA_HOME / "bin" / "ptxas"), f"-arch=sm_{CC[0]}{CC[1]}", "-v", str(path), "-o", os.devnull]
                info = subprocess.run(args + ([f"-maxrregcount={cap}"] if cap else []), capture_output=True,
                                      text=True, check=True).stderr
                regs = int(re.search(r"Used (\d+) registers", info).group(1))
                smem = int(re.search(r"(\d+) bytes smem", info).group(1))
                spill = re.search(r"(\d+) bytes spill stores", info).group(1)
                print(f"{name}: cap {cap}: {regs} registers, {spill} bytes spilled, {smem} bytes static shared")
                if cap:
                    ok &= regs * fast.THREADS <= 65536 and smem <= fast.STATIC_SHARED_BYTES
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
