"""Where kernel launches go, and recording them as CUDA graphs.

A launch goes to `Target.stream`: 0 (the default stream) or, while a pass is being recorded, a
cuda.core GraphBuilder. Recorded once and replayed, a pass costs one launch instead of a few
hundred, each of which costs Numba tens of microseconds on the host. A graph freezes its kernels'
arguments, so what changes between replays must live in device memory. The simulator has no
graphs: there a replay runs the launches again.

While recording, work that nothing needs soon can go on a branch beside the main chain
(`beside`), joined back before anything overwrites what it reads (`join`).
"""
import contextlib

from numba import config, cuda


class Target:
    """stream: 0 or the GraphBuilder being recorded; branches: the builders of work recorded
    beside it, by name, until they are joined."""

    stream = 0
    branches = {}


def recording():
    return not isinstance(Target.stream, int)


@contextlib.contextmanager
def beside(name):
    """Launches inside the block start after everything queued before it and run beside what is
    queued after it, until join(name). Eager launches stay on one stream in program order. The
    caller joins a branch before anything overwrites what it reads."""
    if not recording():
        yield
        return
    join(name)
    main, branch = Target.stream.split(2)
    Target.stream = branch
    try:
        yield
    finally:
        Target.stream = main
        Target.branches[name] = branch


def join(name):
    """Later launches wait for the branch `name`, if one is open."""
    branch = Target.branches.pop(name, None)
    if branch is not None:
        Target.stream = type(branch).join(Target.stream, branch)


def join_all():
    for name in list(Target.branches):
        join(name)


def new_stream(priority=None):
    """A cuda.core stream on the current device; priority "highest" or "lowest" (CUDA's range)."""
    from cuda.bindings import driver
    from cuda.core import Device, StreamOptions

    device = Device()
    device.set_current()
    if priority is None:
        return device.create_stream()
    _, lowest, highest = driver.cuCtxGetStreamPriorityRange()
    return device.create_stream(options=StreamOptions(priority=highest if priority == "highest" else lowest))


def record(stream, launches, node_priority=False):
    """launches() recorded on `stream` as a completed graph. The capture ends even when recording
    fails (else every later CUDA call fails too); node_priority keeps each kernel's stream
    priority in the graph, so the GPU starts the critical path's blocks first."""
    from cuda.core.graph import GraphCompleteOptions

    cuda.synchronize()  # nothing in flight while a stream records
    builder = stream.create_graph_builder()
    builder.begin_building()
    Target.stream = builder
    try:
        launches()
    finally:
        try:
            join_all()  # a capture ends only once its branches have joined its stream
        finally:
            Target.stream, Target.branches = 0, {}
            built = builder.end_building()
    return built.complete(GraphCompleteOptions(use_node_priority=node_priority))


class Recorded:
    """A pass recorded once on its own stream at the highest priority, replayed on demand."""

    def __init__(self, launches):
        self.launches = launches
        if config.ENABLE_CUDASIM:
            return
        self.stream = new_stream("highest")
        self.graph = record(self.stream, launches, node_priority=True)

    def launch(self):
        """Queue a replay of the pass."""
        if config.ENABLE_CUDASIM:
            self.launches()
        else:
            self.graph.launch(self.stream)

    def sync(self):
        """Wait for queued replays (device memory is then safe to read)."""
        if not config.ENABLE_CUDASIM:
            self.stream.sync()

    def __call__(self):
        self.launch()
        self.sync()
