"""What a programmatic dependent launch (PDL, sm_90 on) saves between the kernels of a recorded
chain. The probe holds its own griddepcontrol intrinsics and launch: tf_numba tried PDL and went
back to plain launches (docs/results/2026-12-02-h200-pdl).

A graph of LAUNCHES kernels, each reading and writing one buffer (so each needs the one before it),
is replayed with plain launches and with dependent ones. Each kernel waits for the kernels before
it (griddepcontrol.wait), then lets the next one be placed (griddepcontrol.launch_dependents), and
runs a chain of `work` dependent fmas a thread. The difference over the launches is the gap a
dependent launch removes per kernel boundary.

    python3 tools/experiments/pdl_probe.py            (a GPU of sm_90 on; not under the simulator)
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from llvmlite import ir  # noqa: E402
from numba import cuda, types  # noqa: E402
from numba.cuda.cudadrv import driver  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

from cudakit import stream as S  # noqa: E402

LAUNCHES = 96


@intrinsic
def wait_then_release(typingctx):
    def codegen(context, builder, signature, args):
        fty = ir.FunctionType(ir.VoidType(), [])
        builder.call(ir.InlineAsm(fty, "griddepcontrol.wait; griddepcontrol.launch_dependents;", "~{memory}",
                                  side_effect=True), [])
        return context.get_dummy_value()
    return types.void(), codegen


@cuda.jit
def work_kernel(buf, work):
    wait_then_release()
    i = cuda.grid(1)
    if i < buf.shape[0]:
        x = buf[i]
        for _ in range(work):
            x = x * np.float32(0.999) + np.float32(0.5)
        buf[i] = x


def launch(blocks, threads, args, dependent):
    """work_kernel[blocks, threads, S.Target.stream](*args), with PDL's attribute when dependent
    (Numba's launch, with the one attribute it does not set)."""
    if not dependent:
        work_kernel[blocks, threads, S.Target.stream](*args)
        return
    from cuda.core import LaunchConfig, launch as core_launch

    compiled = work_kernel.compile(tuple(work_kernel.typeof_pyval(a) for a in args))
    stream = driver._to_core_stream(S.Target.stream)
    prepared = []
    for ty, value in zip(compiled.argument_types, args):
        compiled._prepare_args(ty, value, stream, [], prepared)
    config = LaunchConfig(grid=blocks, block=threads, programmatic_stream_serialization=True)
    core_launch(stream, config, compiled._codelibrary.get_cufunc().kernel, *prepared)


def replay_us(blocks, threads, work, dependent, replays=50):
    buf = cuda.to_device(np.zeros(blocks * threads, np.float32))
    stream = S.new_stream("highest")
    graph = S.record(stream, lambda: [launch(blocks, threads, (buf, work), dependent) for _ in range(LAUNCHES)])
    graph.launch(stream)
    stream.sync()
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(replays):
            graph.launch(stream)
        stream.sync()
        best = min(best, (time.perf_counter() - t) / replays)
    return best * 1e6


def main():
    if cuda.get_current_device().compute_capability < (9, 0):
        print("pdl_probe: error: griddepcontrol needs sm_90 or later (an H100 or H200)", file=sys.stderr)
        return 1
    print(f"{LAUNCHES} launches a graph")
    print(f"{'blocks':>6} {'threads':>7} {'work':>5} {'plain us/kernel':>16} {'dependent us/kernel':>20} {'saved us':>9}")
    for blocks, threads in ((132, 128), (528, 128), (64, 1024)):
        for work in (0, 256, 2048):
            plain = replay_us(blocks, threads, work, False) / LAUNCHES
            dep = replay_us(blocks, threads, work, True) / LAUNCHES
            print(f"{blocks:>6} {threads:>7} {work:>5} {plain:>16.3f} {dep:>20.3f} {plain - dep:>9.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
