"""Passes recorded once as CUDA graphs and replayed: one launch for a whole pass instead of a
few hundred, each of which costs Numba tens of microseconds on the host (REFERENCE.md). A graph
freezes its kernels' arguments, so what changes between replays lives in device memory (the
tokens, and the rows of the generation step). The simulator has no graphs: there a replay runs
the pass again.

The pass's own stream has the highest priority and its branches (launch.beside) the lowest; a
graph keeps each kernel's priority from the stream it was recorded on, so when both are ready the
GPU starts the blocks of the critical path first and the branches fill what is left."""
from numba import config, cuda

from .launch import Target, join_all


class Recorded:
    def __init__(self, record):
        self.record = record
        if config.ENABLE_CUDASIM:
            return
        from cuda.bindings import driver
        from cuda.core import Device, StreamOptions
        from cuda.core.graph import GraphCompleteOptions

        device = Device()
        device.set_current()
        _, _, highest = driver.cuCtxGetStreamPriorityRange()
        self.stream = device.create_stream(options=StreamOptions(priority=highest))
        builder = self.stream.create_graph_builder()
        cuda.synchronize()
        builder.begin_building()
        Target.stream = builder
        try:
            record()
        finally:  # end the capture even when recording failed, or every later CUDA call fails
            join_all()  # a capture ends only once its branches have joined its stream
            Target.stream = 0
            built = builder.end_building()
        self.graph = built.complete(GraphCompleteOptions(use_node_priority=True))

    def launch(self):
        """Queue a replay of the pass."""
        if config.ENABLE_CUDASIM:
            self.record()
        else:
            self.graph.launch(self.stream)

    def sync(self):
        """Wait for queued replays (device memory is then safe to read)."""
        if not config.ENABLE_CUDASIM:
            self.stream.sync()

    def __call__(self):
        self.launch()
        self.sync()
