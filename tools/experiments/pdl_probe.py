"""What a dependent launch (cudakit.dependent, PDL) saves between the kernels of a recorded chain.

A graph of LAUNCHES kernels, each reading and writing one buffer (so each needs the one before it),
is replayed with plain launches and with dependent ones; each kernel waits for its inputs (which
lets the next one be placed), and runs a chain of `work` dependent fmas a thread. The difference over the
launches is the gap a dependent launch removes per kernel boundary.

    python3 tools/experiments/pdl_probe.py            (a GPU of sm_90 on; not under the simulator)
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from cudakit import stream as S  # noqa: E402
from cudakit.dependent import supported, wait_inputs  # noqa: E402

LAUNCHES = 96


@cuda.jit
def work_kernel(buf, work):
    wait_inputs()
    i = cuda.grid(1)
    if i < buf.shape[0]:
        x = buf[i]
        for _ in range(work):
            x = x * np.float32(0.999) + np.float32(0.5)
        buf[i] = x


def replay_us(blocks, threads, work, dependent, replays=50):
    buf = cuda.to_device(np.zeros(blocks * threads, np.float32))
    S.DEPENDENT = dependent
    stream = S.new_stream("highest")
    graph = S.record(stream, lambda: [S.launch(work_kernel, blocks, threads, 0, buf, work) for _ in range(LAUNCHES)])
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
    print(f"sm_90 on: {supported()}; {LAUNCHES} launches a graph")
    print(f"{'blocks':>6} {'threads':>7} {'work':>5} {'plain us/kernel':>16} {'dependent us/kernel':>20} {'saved us':>9}")
    for blocks, threads in ((132, 128), (528, 128), (64, 1024)):
        for work in (0, 256, 2048):
            plain = replay_us(blocks, threads, work, False) / LAUNCHES
            dep = replay_us(blocks, threads, work, True) / LAUNCHES
            print(f"{blocks:>6} {threads:>7} {work:>5} {plain:>16.3f} {dep:>20.3f} {plain - dep:>9.3f}", flush=True)


if __name__ == "__main__":
    main()
