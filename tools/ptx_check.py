"""Compiles the kernels that run in large blocks, the one-row matrix kernels and the forward
kernels generation's decode step runs, for sm_90, on a machine with the CUDA toolkit but no GPU,
and checks with ptxas that each one can launch at its block size, and that the tiled matrix
kernels copy their operands with cp.async and read the staged chunks with vector loads.

The simulator runs kernels as Python and never types them, so a kernel it runs can still fail to
compile for the GPU, or compile to more registers than its block can hold (the launch then fails
with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as an earlier tf matrix kernel did on the H200). For
each kernel this types and compiles it with NVVM under the options it is built with, then asks
ptxas for its registers (registers x threads <= 65,536), spills, stack and static shared memory.
tf's matrix kernels are checked under every tile GPT-2's shapes pick, and must keep their
accumulators in registers (no stack). Numba looks for a device, NVRTC and libdevice through the
driver; without a driver those lookups are answered here.

    CUDA_HOME=/usr/local/cuda python tools/ptx_check.py      (not under NUMBA_ENABLE_CUDASIM)

Exit status: 0 every kernel fits; 1 one does not, or the toolkit is missing or fails; 2 a usage error.
"""
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import types as pytypes
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numba.cuda.cudadrv.libs as libs  # noqa: E402
import numba.cuda.cudadrv.nvrtc as nvrtc  # noqa: E402
import numba.cuda.cudadrv.nvvm as nvvm  # noqa: E402
import numba.cuda.dispatcher as dispatcher  # noqa: E402
from numba import config, cuda, types  # noqa: E402

from microgpt_numba import fast  # noqa: E402
from tf_numba import kernels as tf_kernels  # noqa: E402
from tf_numba.launch import BLOCK  # noqa: E402
from tf_numba import matmul as tf_matmul  # noqa: E402
from tf_matmul_sweep import SHAPES  # noqa: E402
from tool_cli import OneLineParser, parsed  # noqa: E402

CC = (9, 0)
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
REGISTERS_PER_BLOCK = 65536
nvrtc.get_supported_ccs = lambda: (CC,)
dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=CC)
PTXAS = CUDA_HOME / "bin" / "ptxas"
LIBDEVICE = CUDA_HOME / "nvvm" / "libdevice" / "libdevice.10.bc"
nvvm.get_libdevice = libs.get_libdevice = lambda: str(LIBDEVICE)

F1, F2, F3 = (types.Array(types.float32, d, "C") for d in (1, 2, 3))
I1, I2 = types.Array(types.int32, 1, "C"), types.Array(types.int32, 2, "C")
L1, U1 = types.Array(types.int64, 1, "C"), types.Array(types.uint16, 1, "C")
B, I64, F32 = types.boolean, types.int64, types.float32
# (name, kernel, the argument types it is launched with, threads per block, its max_registers, whether
# its local arrays must live in registers)
# The one-row kernels at GPT-2 124M's shapes, and at the widest d_model tf_numba accepts, where the
# staged input row (4 x d_model floats for mlp.c_proj) takes the most shared memory.
WIDEST = tf_kernels.LN_D_MAX
ROW_SHAPES = {(kind, cols, S) for kind, rows, cols, S, *_ in SHAPES if kind in tf_matmul.ROW_KINDS} | \
    {("tf_fc", c * WIDEST, s * WIDEST) for c, s in ((3, 1), (1, 1), (4, 1), (1, 4))} | \
    {("tf_unembedding", 50257, WIDEST)}


def tiled_label(name, tile, fused, wa, wb, epilogue):
    return f"{name}{'_' + epilogue if epilogue else ''} {tile} copies {wa}/{wb} {'fma' if fused else 'nofma'}"


# what the passes launch (the unembedding: "max" before the softmax, none for greedy generation)
PASS_EPILOGUES = {"tf_fc": (None, "gelu", "add"), "tf_fc_back_din": (None, "gelu_back"), "tf_unembedding": (None, "max")}


def gpt2_tiled():
    """(kind, tile, fused, A's and B's copy widths, epilogue) of every tiled kernel GPT-2's shapes
    launch (the arena's arrays start 16 bytes aligned); tf_fc also with forward.py's epilogues."""
    keys = set()
    for kind, rows, cols, S, a_shape, b_shape, _ in SHAPES:
        if rows == 1:
            continue  # the one-row kernel's
        a_trans, b_by_output = tf_matmul.KINDS[kind][:2]
        for fused in (True, False):
            tile = tf_matmul.tile_for(kind, rows, cols, S, fused)
            wa = tf_matmul.run_width(a_shape[1], True, a_trans, tile.TM * tile.RT)
            wb = tf_matmul.run_width(b_shape[1], True, not b_by_output, tile.TN * tile.CT)
            for epilogue in PASS_EPILOGUES.get(kind, (None,)):
                keys.add((kind, tile, fused, wa, wb, epilogue))
    return keys


TILED = gpt2_tiled()
KERNELS = [
    ("train_kernel", fast.train_kernel, (F1, F1, F1, F1, B, I2, I1, I2, I2, I1, I64, I1, I1, I1, F2, I64, F2),
     fast.THREADS, fast.KERNEL_OPTIONS.get("max_registers"), False),
    ("generate_kernel", fast.generate_kernel, (F1, F1, F1, B, I2, I2, I2, I1, I64, I64, F32, F1, I64, I2, I1),
     fast.THREADS, fast.KERNEL_OPTIONS.get("max_registers"), False),
    ("tf_argmax", tf_kernels.tf_argmax, (F2, L1, U1), tf_kernels.ARGMAX_THREADS, None, False),
    ("tf_argmax_logits", tf_kernels.tf_argmax_logits, (F2, L1, U1), tf_kernels.ARGMAX_THREADS, None, False),
    ("tf_unembedding_softmax", tf_kernels.tf_unembedding_softmax, (F2, L1, F2, I64, F1), tf_kernels.SOFTMAX_THREADS,
     tf_kernels.SOFTMAX_OPTIONS.get("max_registers"), False),
    ("tf_unembedding_scale", tf_kernels.tf_unembedding_scale, (F2, L1, I64, F1, F2, B), tf_kernels.SOFTMAX_PASS_THREADS, None,
     False),
    ("tf_unembedding_softmax_chain", tf_kernels.tf_unembedding_softmax_chain, (F2, L1), tf_kernels.SOFTMAX_THREADS,
     tf_kernels.SOFTMAX_OPTIONS.get("max_registers"), False),
    ("tf_loss", tf_kernels.tf_loss, (F2, U1, F1, I64), tf_kernels.LOSS_THREADS, None, False),
    ("tf_ln", tf_kernels.tf_ln, (F1, F1, F2, F1, F1, F2, L1, B), tf_kernels.LN_THREADS, None, False),
    ("tf_ln_back", tf_kernels.tf_ln_back, (F1, F2, F1, F1, F2, F1, F1, F2, I64, B, F2, F2, B),
     tf_kernels.LN_BACK_THREADS, None, False),
    # the passes' fused attention
    ("tf_attn", tf_kernels.tf_attn(64, True), (F2, F3, F2, L1, I64, F32, B), tf_kernels.ATTN_THREADS, None, False),
    # a head whose rows are not 16-byte aligned: the scalar copies and key reads
    ("tf_attn narrow", tf_kernels.tf_attn(64, False), (F2, F3, F2, L1, I64, F32, B), tf_kernels.ATTN_THREADS, None,
     False),
    ("tf_attn_back_row", tf_kernels.tf_attn_back_row(64, True), (F2, F2, F3, F3, I64, B), tf_kernels.ATTN_THREADS,
     None, False),
    ("tf_attn_back_row narrow", tf_kernels.tf_attn_back_row(64, False), (F2, F2, F3, F3, I64, B),
     tf_kernels.ATTN_THREADS, None, False),
    # the backward's last kernel: its groups of samples must stay in registers
    ("tf_embedding_back", tf_kernels.tf_embedding_back, (F2, U1, F2, F2, I64), BLOCK, None, True),
    # the forward kernels that take their rows from device memory (generation's decode step)
    ("tf_embedding", tf_kernels.tf_embedding, (F2, F2, U1, F2, L1, I64), BLOCK, None, False),
    ("tf_add", tf_kernels.tf_add, (F2, F2, F2, L1, I64), BLOCK, None, False),
    ("tf_attn_scores", tf_kernels.tf_attn_scores, (F2, F3, L1, I64, I64, I64, F32, B), BLOCK, None, False),
    ("tf_attn_softmax", tf_kernels.tf_attn_softmax, (F3, L1, I64), tf_kernels.ATTN_LANES, None, False),
    ("tf_attn_z", tf_kernels.tf_attn_z, (F2, F3, F2, L1, I64, I64, B), BLOCK, None, False),
    ("tf_gelu", tf_kernels.tf_gelu, (F2, F2, L1, I64), BLOCK, None, False),
] + [
    (tiled_label(*key), tf_matmul.build(*key), (F2, F2, F1, F2, L1, I64, F32, F2, F2), key[1].RT * key[1].CT, None,
     True) for key in sorted(TILED, key=str)
] + [
    (f"{name}_row{'_' + epilogue if epilogue else ''} {tile} S<={s_max} {'fma' if fused else 'nofma'}",
     tf_matmul.build_row(name, tile, fused, s_max, epilogue), (F2, F2, F1, F2, L1, I64, F32, F2, F2), tile.NT, None,
     True)
    for name, tile, s_max, fused, epilogue in sorted(
        {(kind, tf_matmul.row_tile_for(cols, tf_matmul.row_s_max(S)), tf_matmul.row_s_max(S), fused, epilogue)
         for kind, cols, S in ROW_SHAPES for fused in (True, False)
         for epilogue in PASS_EPILOGUES.get(kind, (None,))}, key=str)
]


def vector_load_needed(name, tile):
    """The load build(name, tile)'s PTX must hold: "ld.shared.v4" where an operand is staged by
    output and read 4 steps at a time (NVVM merges none of those scalar loads by itself: tf_fc's
    T_WIDE kernel had 0 of them without cudakit.vector), "ld.shared.v" where only a thread's
    neighbouring outputs are read together, None where a thread reads one float at a time."""
    kind = tf_matmul.KINDS[name]
    if not kind.a_trans or kind.b_by_output:
        return "ld.shared.v4"
    return "ld.shared.v" if tile.TM > 1 or tile.TN > 1 else None


def needed(name, tile, fused, wa, wb, epilogue):
    """What a tiled kernel's PTX must hold: its vector loads, and its copies' instructions."""
    copies = {4: "cp.async.cg.shared.global", 1: "cp.async.ca.shared.global"}
    return [x for x in (vector_load_needed(name, tile), copies[wa], copies[wb]) if x]


# what each tiled kernel GPT-2's shapes pick must hold in its PTX
NEEDED = {tiled_label(*key): needed(*key) for key in TILED}


def ptxas(path, cap):
    args = [str(PTXAS), f"-arch=sm_{CC[0]}{CC[1]}", "-v", str(path), "-o", os.devnull]
    info = subprocess.run(args + ([f"-maxrregcount={cap}"] if cap else []), capture_output=True, text=True,
                          check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", info).group(1))
    smem = re.search(r"(\d+) bytes smem", info)  # not printed for a kernel with no shared memory
    smem = int(smem.group(1)) if smem else 0
    spill = int(re.search(r"(\d+) bytes spill stores", info).group(1))
    stack = int(re.search(r"(\d+) bytes stack frame", info).group(1))
    return regs, spill, smem, stack


def compile_errors():
    """What a missing or failing NVVM raises (those this Numba has), to report in one line."""
    from numba.cuda.cudadrv import error

    return tuple(getattr(error, name) for name in ("NvvmError", "NvvmSupportError", "CudaSupportError")
                 if isinstance(getattr(error, name, None), type))


def check(index):
    """KERNELS[index] compiled and asked of ptxas: (its report line, whether it fits and holds what
    it must), or (a one-line error, None) where NVVM or ptxas fails."""
    name, kernel, signature, threads, cap, registers_only = KERNELS[index]
    try:
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kernel.ptx"
            path.write_text(ptx)
            regs, spill, smem, stack = ptxas(path, cap)
    except compile_errors() as exc:
        return (f"ptx_check: error: {name}: NVVM failed ({' '.join(str(exc).split())}); check the CUDA "
                f"toolkit under CUDA_HOME={CUDA_HOME}"), None
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines() or ["no output"]
        return (f"ptx_check: error: {name}: {PTXAS} failed ({detail[-1]}); check the CUDA toolkit under "
                f"CUDA_HOME={CUDA_HOME}"), None
    fits = regs * threads <= REGISTERS_PER_BLOCK and smem <= 48 * 1024 and not spill
    fits &= not (registers_only and stack)  # local arrays left in memory: every access a load
    missing = [x for x in NEEDED.get(name, ()) if x not in ptx]
    line = (f"{name}: {threads} threads, max_registers {cap}: {regs} registers, {spill} bytes spilled, "
            f"{stack} bytes stack, {smem} bytes static shared: {'ok' if fits else 'DOES NOT FIT'}"
            + (f"; NO {', '.join(missing)} (the staged chunks are copied or read another way)" if missing else ""))
    return line, fits and not missing


def main(argv=None):
    if parsed(OneLineParser(prog="ptx_check.py", description=__doc__.splitlines()[0]).parse_args, argv,
              "ptx_check") is None:
        return 2
    if config.ENABLE_CUDASIM:
        print("ptx_check: error: unset NUMBA_ENABLE_CUDASIM; the simulator compiles nothing", file=sys.stderr)
        return 2
    for need in (PTXAS, LIBDEVICE):  # else a FileNotFoundError from deep in Numba, or from subprocess
        if not need.is_file():
            print(f"ptx_check: error: CUDA_HOME={CUDA_HOME} has no {need.relative_to(CUDA_HOME)} ({need} is missing); "
                  "set CUDA_HOME to the CUDA toolkit's folder", file=sys.stderr)
            return 1
    ok = True
    # Each kernel compiles alone (NVVM, then ptxas), so they compile on every core; the reports
    # come back in KERNELS' order.
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        for line, fits in pool.imap(check, range(len(KERNELS))):
            if fits is None:
                print(line, file=sys.stderr)
                return 1
            print(line)
            ok &= fits
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
