"""Replaying the reference engine's steps from CUDA graphs (cuda.core), one graph per sequence length.

A step's launches depend only on n (the positions trained); everything else a step changes is in
StepValues' device memory. The first step runs eagerly, which compiles or loads every kernel before
any recording; each later step replays the graph recorded for its n, recording it on first use.
Later steps are queued on one stream (the step's row of the StepTable into StepValues, the graph,
its loss into pinned host memory) and the host waits only in wait(), so it prepares the next steps
while the GPU runs. In the CUDA simulator there are no graphs and every step runs eagerly.
"""
import numpy as np
from numba import config, cuda

from cudakit.stream import new_stream, record


class StepGraphs:
    def __init__(self, num_steps):
        self.graphs = {}
        self.warm = False
        self.stream = None
        self.loss_sums = cuda.pinned_array(num_steps, dtype=np.float32)  # each step's summed loss
        if not config.ENABLE_CUDASIM:
            self.stream = new_stream()

    def step(self, sv, table, step, n, launches):
        """Runs (the first time, and in the simulator) or queues step `step`: launches() is its n positions."""
        if self.stream is None or not self.warm:
            sv.set_step(table, step)
            launches()
            sv.loss.copy_to_host(self.loss_sums[step:step + 1])  # waits for the step
            self.warm = True
            return
        graph = self.graphs.get(n)
        if graph is None:
            graph = self.graphs[n] = record(self.stream, launches)
        sv.set_step(table, step, self.stream)
        graph.launch(self.stream)
        sv.loss.copy_to_host(self.loss_sums[step:step + 1], stream=self.stream)

    def wait(self):
        """Until every queued step has finished and loss_sums holds its loss."""
        if self.stream is not None:
            self.stream.sync()
