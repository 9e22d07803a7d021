"""The command line: output lines, the notes on stderr, Numba kept quiet, and runs in chunks that
print the bits of one launch. (Bad input: test_microgpt_bad_input.py.)"""
import io
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import config

from microgpt_numba import cli, fast
from microgpt_numba.glibc_rand import GlibcRand
from tests.conftest import PYTHONPATH, ROOT
from tests.microgpt.test_microgpt_fast import setup as new_run


def run_cli(args, **env):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **env}
    return subprocess.run([sys.executable, "-m", "microgpt_numba", *args], capture_output=True, env=env,
                          cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def piped_runs(tmp_path_factory):
    """Both engines on a tiny file: 1 step, 1 sample, stdout a pipe."""
    path = tmp_path_factory.mktemp("cli") / "tiny.txt"
    path.write_bytes(b"ab\r\nba\n\nabc\n")
    runs = {}
    for engine in ("fast", "reference"):
        result = run_cli(["--input", str(path), "--steps", "1", "--samples", "1", "--temperature", "0.9",
                          "--engine", engine])
        assert result.returncode == 0, result.stderr
        runs[engine] = result.stdout, result.stderr
    return path, runs


@pytest.mark.slow
def test_output_lines_when_piped(piped_runs):
    path, runs = piped_runs
    lines = runs["fast"][0].split(b"\n")
    num_params = 2 * 4 * 16 + 16 * 16 + 4 * 16 * 16 + 2 * 64 * 16  # wte, lm_head (vocab 4), wpe, attention, mlp
    assert lines[:4] == [f"corpus: {path}".encode(), b"num docs: 3", b"vocab size: 4", b"num params: %d" % num_params]
    assert re.fullmatch(rb"step    1 /    1 \| loss \d\.\d{4}", lines[4])
    assert lines[5:7] == [b"", b"--- inference (new, hallucinated names) ---"]
    assert re.fullmatch(rb"sample  1: [abc]*", lines[7]) and lines[8:] == [b""]


def test_engines_print_the_same_run(piped_runs):
    _, runs = piped_runs
    assert runs["fast"][0] == runs["reference"][0]


def test_stderr_is_one_note_and_no_warning(piped_runs):
    """In the simulator: how long a step takes there; on a GPU: at most the first run's compile note."""
    _, runs = piped_runs
    for engine, (_, err) in runs.items():
        lines = err.decode().splitlines()
        assert "Warning" not in err.decode() and len(lines) <= 1, err
        if config.ENABLE_CUDASIM:
            assert lines[0].startswith("microgpt_numba: NUMBA_ENABLE_CUDASIM=1: the kernels run in Numba's CPU "
                                       "simulator, roughly") and f"with the {engine} engine" in lines[0]


def test_simulator_note_suggests_a_short_run():
    opts = cli.parse_options([])
    note = cli.simulator_note(opts)
    assert re.search(r"takes roughly \d+ (minutes|hours)", note) and note.endswith("for a quick look try --steps 2 --samples 1")
    assert "quick look" not in cli.simulator_note(cli.parse_options(["--steps", "2", "--samples", "1"]))


def test_compile_note_only_when_numba_has_no_cache(tmp_path):
    """is_cached reads the kernel's cache index (no GPU needed, the codegen's GPU faked): False
    without an entry, True with one for this GPU and source, None when it cannot tell."""
    (tmp_path / "kmod.py").write_text(textwrap.dedent("""\
        from numba import cuda

        @cuda.jit(cache=True)
        def k(x):
            x[0] = 1
        """))
    script = textwrap.dedent("""\
        import sys
        from kmod import k
        from microgpt_numba.cli import compile_note, is_cached
        print(is_cached(k))  # no GPU: the codegen cannot say which it is
        print(compile_note("fast"))  # the real kernels: nothing to say
        class Codegen:
            def magic_tuple(self):
                return ((13, 0), (9, 0))
        k.targetctx.codegen = lambda: Codegen()
        print(is_cached(k))
        k._cache._cache_file.save(k._cache._index_key(("a signature",), Codegen()), ("a kernel",))
        print(is_cached(k))
        """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), PYTHONPATH]), NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["None", "None", "False", "True"]


# ---- runs in chunks: the bits of one launch

DOCS = [b"abcdab", b"c", b"ab"]  # 6 trained positions, 2 and 3; a vocabulary of 5
STEPS, SAMPLES, TEMPERATURE = 3, 3, np.float32(0.9)


def fast_run(monkeypatch, steps_first, steps_cap, samples_first, samples_cap):
    monkeypatch.setattr(fast, "FIRST_CHUNK_STEPS", steps_first)
    monkeypatch.setattr(fast, "MAX_CHUNK_STEPS", steps_cap)
    monkeypatch.setattr(fast, "FIRST_CHUNK_SAMPLES", samples_first)
    monkeypatch.setattr(fast, "MAX_CHUNK_SAMPLES", samples_cap)
    gen, dataset, arenas, model, cache, scratch = new_run(DOCS)
    layout = fast.Layout(model, arenas[0], cache, arenas[1], scratch, arenas[2])
    assert fast.staged_bytes(*layout.arenas, layout.pos_scratch) > 0  # the arenas in (poisoned) shared memory
    generation = fast.Generation(layout, dataset, SAMPLES, TEMPERATURE, gen)
    losses = [[x.view(np.uint32) for x in chunk]
              for chunk in fast.train_chunks(layout, dataset, STEPS, while_training=generation.load)]
    trained = [a.base.copy_to_host().view(np.uint32) for a in arenas]
    samples = list(generation.chunks())
    return losses, trained, samples, arenas[1].base.copy_to_host().view(np.uint32)


@pytest.fixture
def poisoned_shared_memory(monkeypatch):
    """Each block's dynamic shared memory starts as 0xff bytes (NaN floats) instead of the simulator's
    zeros, as garbage would on a GPU: a launch that read what it did not write would show it."""
    if not config.ENABLE_CUDASIM:
        pytest.skip("the simulator's shared memory")
    from numba.cuda.simulator import kernelapi

    init = kernelapi.FakeCUDAShared.__init__

    def poisoned(self, dynshared_size):
        init(self, dynshared_size)
        self._dynshared[:] = -1

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", poisoned)


@pytest.mark.slow
def test_chunked_run_is_the_one_launch_run(monkeypatch, poisoned_shared_memory):
    """Training in launches of 1 and 2 steps and sampling in launches of 1 and 2 samples (the
    unused draws of one launch start the next) give the bits of one launch each: the losses, every
    float of the arenas after training, the samples, the train cache after sampling."""
    one = fast_run(monkeypatch, 8, 8, 8, 8)
    chunked = fast_run(monkeypatch, 1, 2, 1, 2)
    assert [len(c) for c in one[0]] == [STEPS] and [len(c) for c in chunked[0]] == [1, 2]
    assert [len(c) for c in one[2]] == [SAMPLES] and [len(c) for c in chunked[2]] == [1, 2]
    assert sum(one[0], []) == sum(chunked[0], [])
    for ours, ref, name in zip(chunked[1], one[1], ("params", "train cache", "scratch")):
        np.testing.assert_array_equal(ours, ref, err_msg=name)
    assert sum(one[2], []) == sum(chunked[2], [])
    assert len({len(s) for s in sum(one[2], [])}) > 1  # samples of different lengths: the draws' handoff matters
    np.testing.assert_array_equal(chunked[3], one[3], err_msg="train cache after sampling")


def test_chunk_plan():
    assert list(fast.chunk_plan(1000, 1024, 32768)) == [(0, 1000)]
    assert list(fast.chunk_plan(5000, 1024, 32768)) == [(0, 1024), (1024, 2048), (3072, 1928)]
    assert list(fast.chunk_plan(7, 1, 2)) == [(0, 1), (1, 2), (3, 2), (5, 2)]
    assert list(fast.chunk_plan(0, 1, 2)) == []


def test_cli_streams_chunks_and_the_loss_log(monkeypatch, tmp_path):
    """main() on the fast engine in chunks: a step line per step, in order, flushed per chunk, the
    CSV row of each step as printed."""
    if not config.ENABLE_CUDASIM:
        pytest.skip("a simulator run")
    path = tmp_path / "tiny.txt"
    path.write_bytes(b"ab\nba\n")
    monkeypatch.setattr(fast, "FIRST_CHUNK_STEPS", 1)
    monkeypatch.setattr(fast, "MAX_CHUNK_STEPS", 1)
    out = io.BytesIO()
    opts = cli.parse_options(["--input", str(path), "--steps", "2", "--samples", "0", "--loss-log",
                              str(tmp_path / "l.csv")])
    err = io.StringIO()
    cli.train(opts, out, err)
    lines = out.getvalue().split(b"\n")
    steps = [line for line in lines if line.startswith(b"step")]
    assert [s[:16] for s in steps] == [b"step    1 /    2", b"step    2 /    2"]
    rows = (tmp_path / "l.csv").read_text().splitlines()
    assert rows[0] == "step,loss,loss_hex"
    assert [r.split(",")[1] for r in rows[1:]] == [s.split(b"loss ")[1].decode() for s in steps]
    assert err.getvalue().count("\n") == 1


def test_sampling_chunks_take_the_c_draws(monkeypatch):
    """Generation's bookkeeping alone (the launches stood in for, sample lengths 0..BLOCK_SIZE at
    random): sample k of any chunk reads exactly the draws the C's k-th sample takes, one per token,
    and the draws kept ahead stay bounded."""
    from microgpt_numba.constants import BLOCK_SIZE
    from microgpt_numba.glibc_rand import rand_uniform

    monkeypatch.setattr(fast, "FIRST_CHUNK_SAMPLES", 3)
    monkeypatch.setattr(fast, "MAX_CHUNK_SAMPLES", 7)
    rng = np.random.default_rng(1)
    seen, ahead = [], []

    class Stand(fast.Generation):
        def __init__(self, num_samples, gen):  # no device: only what chunks() uses
            self.cap, self.gen, self.pending, self.num_samples = min(num_samples, 7), gen, np.zeros(0, np.float32), \
                num_samples
            self.first_uniforms = self.draws(3 * BLOCK_SIZE)
            self.id_to_char = np.arange(256, dtype=np.uint8)

        def start(self, table, count, upload=True):
            self.lengths = rng.integers(0, BLOCK_SIZE + 1, size=count)
            pos = 0
            for length in self.lengths:
                took = min(length + 1, BLOCK_SIZE)
                seen.append(table[pos:pos + took].tolist())
                pos += took

        def collect(self):
            ahead.append(self.pending.shape[0])
            return np.zeros((len(self.lengths), BLOCK_SIZE), np.int32), self.lengths

    gen, ref = GlibcRand(42), GlibcRand(42)
    sizes = [len(chunk) for chunk in Stand(200, gen).chunks()]
    assert sizes[:3] == [3, 6, 7] and sum(sizes) == 200
    assert seen == [[rand_uniform(ref) for _ in range(len(s))] for s in seen]
    assert max(ahead) <= 2 * 7 * BLOCK_SIZE
