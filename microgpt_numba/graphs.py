"""Replaying the reference engine's steps from CUDA graphs (cuda.core), one graph per sequence length.

A step's launches depend only on n (the positions trained); everything else a step changes is in
StepValues' device memory. The first step runs eagerly, which compiles or loads every kernel before
any recording; each later step replays the graph recorded for its n, recording it on first use.
In the CUDA simulator there are no graphs and every step runs eagerly.
"""
from numba import config, cuda

from .launch import recording_into


class StepGraphs:
    def __init__(self):
        self.graphs = {}
        self.warm = False
        self.stream = None
        if not config.ENABLE_CUDASIM:
            from cuda.core import Device

            device = Device()
            device.set_current()
            self.stream = device.create_stream()

    def run(self, n, launches):
        """Runs launches() (one step of n positions) and waits for it to finish."""
        if self.stream is None or not self.warm:
            launches()
            cuda.synchronize()
            self.warm = True
            return
        graph = self.graphs.get(n)
        if graph is None:
            builder = self.stream.create_graph_builder()
            builder.begin_building()
            with recording_into(builder):
                launches()
            graph = self.graphs[n] = builder.end_building().complete()
        cuda.synchronize()  # the step's values, copied from pageable host memory, have landed
        graph.launch(self.stream)
        self.stream.sync()
