"""Replaying the reference engine's steps from CUDA graphs (cuda.core), one graph per sequence length.

A step's launches depend only on n (the positions trained); everything else a step changes is in
StepValues' device memory. The first step runs eagerly, which compiles or loads every kernel before
any recording; each later step replays the graph recorded for its n, recording it on first use.
Later steps are queued on one stream (the step's row of the StepTable into StepValues, the graph,
its positions' target probabilities into pinned host memory) and the host waits only in wait(),
so it prepares the next steps while the GPU runs. In the CUDA simulator there are no graphs and every step runs eagerly.
"""
import numpy as np
from numba import config, cuda

from cudakit.stream import new_stream, record

from .constants import BLOCK_SIZE


class StepGraphs:
    """step(sv, table, step, ...) runs the table's row `step` and leaves its positions' target
    probabilities in target_probs[step]: num_steps slots, one per row. model.train queues a batch of steps per table and
    reuses the slots batch after batch (after wait()), so a run of any length needs PRINT_EVERY slots."""

    def __init__(self, num_steps):
        self.graphs = {}
        self.warm = False
        self.stream = None
        self.target_probs = cuda.pinned_array((num_steps, BLOCK_SIZE), dtype=np.float32)
        if not config.ENABLE_CUDASIM:
            self.stream = new_stream()

    def step(self, sv, table, step, n, launches):
        """Runs (the first time, and in the simulator) or queues step `step`: launches() is its n positions."""
        if self.stream is None or not self.warm:
            sv.set_step(table, step)
            launches()
            sv.target_probs.copy_to_host(self.target_probs[step])  # waits for the step
            self.warm = True
            return
        graph = self.graphs.get(n)
        if graph is None:
            graph = self.graphs[n] = record(self.stream, launches)
        sv.set_step(table, step, self.stream)
        graph.launch(self.stream)
        sv.target_probs.copy_to_host(self.target_probs[step], stream=self.stream)

    def wait(self):
        """Until every queued step has finished and target_probs holds its probabilities."""
        if self.stream is not None:
            self.stream.sync()
