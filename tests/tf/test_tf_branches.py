"""The branches of a recorded training step (cudakit.stream.beside / join): no kernel on the main
stream may write memory that an open branch reads or writes, or read memory that it writes.

The step is recorded against a stand-in for cuda.core's GraphBuilder, with the launch functions
replaced by a recorder, so no kernel runs: each launch's arrays are classed as written or read by
the table below (the kernels' own argument order), and their byte ranges are compared. On a GPU
the last test compares the replayed graph's arenas with the eager step's, bit for bit, on the tiny
model; tools/bench.py's graph_arenas_equal_eager does the same at GPT-2's size."""
import numpy as np
import pytest
from numba import cuda

from cudakit import stream
from cudakit.arrays import byte_bounds, is_device_array
from tf_numba import assets, launch
from tf_numba.model import TFModel
from tf_numba.training import run_step, training_step

# The arguments each kernel writes (positions after the launch's geometry); every other array it reads.
WRITES = {
    "tf_memset": {0}, "tf_embedding": {3}, "tf_ln": {3, 4, 5}, "tf_attn": {1, 2}, "tf_attn_scores": {1},
    "tf_attn_softmax": {0}, "tf_attn_z": {2}, "tf_add": {2}, "tf_gelu": {1},
    "tf_unembedding_softmax": {0, 4}, "tf_unembedding_scale": {0, 4},
    "tf_loss": {0, 2}, "tf_gelu_back": {2}, "tf_attn_back_row": {3}, "tf_attn_back_dot": {2}, "tf_attn_back_softmax": {1},
    "tf_attn_back_qkv": {4}, "tf_embedding_back": {2, 3}, "tf_fc_back_dbias": {1}, "tf_ln_back": {5, 6, 7, 11},
}


def byte_range(array):
    return byte_bounds(array)


class Builder:
    """What the recording needs of a GraphBuilder: split into branches, join them back."""

    def __init__(self, log, label):
        self.log, self.label = log, label

    def split(self, count):
        branch = Builder(self.log, f"branch {len(self.log)}")
        self.log.append(("split", branch))
        return self, branch

    @staticmethod
    def join(*builders):
        builders[0].log.append(("join", builders[1]))
        return builders[0]


def record_step(monkeypatch, m, T, skip_join=None):
    """Record the training step (training.training_step); return the hazards: (main kernel,
    branch kernel, what the main kernel does to the branch's memory)."""
    log = []
    main = Builder(log, "main")

    def note(name, args, written):
        arrays = [(i, a) for i, a in enumerate(args) if is_device_array(a)]
        log.append(("launch", stream.Target.stream, name,
                    [byte_range(a) for i, a in arrays if i in written],
                    [byte_range(a) for i, a in arrays if i not in written]))

    monkeypatch.setattr(launch, "elementwise", lambda kernel, n, *args: note(kernel.__name__, args,
                                                                            WRITES[kernel.__name__]))
    monkeypatch.setattr(launch, "blocks", lambda kernel, grid, block, shared, *args: note(kernel.__name__, args,
                                                                                         WRITES[kernel.__name__]))
    def matmul(name, a, b, start, out, *rest, res=None, extra=None, **kw):
        """A product writes out and, with an epilogue, extra; it reads res (a residual add)."""
        args = (a, b, start, out, res, extra)
        note(name, [x for x in args if x is not None], {3, 5} if res is not None else {3, 4})

    monkeypatch.setattr(launch, "matmul", matmul)
    join = stream.join
    if skip_join is not None:  # (stream.beside's own join of an earlier branch of that name goes too)
        monkeypatch.setattr(stream, "join", lambda name: None if name == skip_join else join(name))
    stream.Target.stream, stream.Target.branches = main, {}
    try:
        training_step(m, T)
        for name in list(stream.Target.branches):  # what stream.record's join_all does
            join(name)
        assert not stream.Target.branches and stream.Target.stream is main
    finally:
        stream.Target.stream, stream.Target.branches = 0, {}

    def overlap(ranges, others):
        return any(lo < o_hi and o_lo < hi for lo, hi in ranges for o_lo, o_hi in others)

    open_branches, hazards = {}, []
    for event in log:
        if event[0] == "split":
            open_branches[event[1]] = []
        elif event[0] == "join":
            del open_branches[event[1]]
        elif event[1] is main:
            _, _, name, writes, reads = event
            for launches in open_branches.values():
                for _, _, b_name, b_writes, b_reads in launches:
                    if overlap(writes, b_writes + b_reads):
                        hazards.append((name, b_name, "overwrites what the branch uses"))
                    if overlap(reads, b_writes):
                        hazards.append((name, b_name, "reads what the branch writes"))
        else:
            open_branches[event[1]].append(event)
    return hazards, log


@pytest.fixture(scope="module")
def tiny_model(tiny_assets):
    cfg, tensors = assets.load_model(tiny_assets / "model.safetensors")
    return TFModel(cfg, tensors, "fma")


def test_branches_never_race_the_main_stream(monkeypatch, tiny_model):
    hazards, log = record_step(monkeypatch, tiny_model, 8)
    assert hazards == []
    # the gradients' zeroing, every layer's four weight gradients and the wte gradient branch off
    assert sum(event[0] == "split" for event in log) == 2 + 4 * tiny_model.cfg.n_layers


@pytest.mark.parametrize("name", ["gradients", "wte", "mlp.c_proj", "mlp.c_fc", "attn.c_proj", "attn.c_attn"])
def test_a_missing_join_is_a_race(monkeypatch, tiny_model, name):
    hazards, _ = record_step(monkeypatch, tiny_model, 8, skip_join=name)
    assert hazards


def test_eager_launches_do_not_branch():
    with stream.beside("x"):
        assert stream.Target.stream == 0
    assert stream.Target.branches == {}


@pytest.mark.gpu
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_recorded_step_gives_the_eager_bits(tiny_assets, tiny_input_size, fp_model):
    """The step recorded as a graph (branches and priorities included) and replayed twice leaves
    the gradients and activations_back arenas as the same step launched in program order does."""
    from bench_tf import arena_bits

    from cudakit.stream import Recorded

    cfg, tensors = assets.load_model(tiny_assets / "model.safetensors")
    data = assets.load_data(tiny_assets / "data", cfg.d_vocab)
    m, T = TFModel(cfg, tensors, fp_model), tiny_input_size
    run_step(m, data, T)  # the tokens, and every kernel compiled before the recording

    recorded = Recorded(lambda: training_step(m, T))
    recorded()
    recorded()
    replayed = arena_bits(m)
    training_step(m, T)
    cuda.synchronize()
    for got, want in zip(replayed, arena_bits(m)):
        assert np.array_equal(got, want)
