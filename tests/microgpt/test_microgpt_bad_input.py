"""Bad input to python -m microgpt_numba: one line on stderr, `microgpt_numba: error: ...`, naming the
problem and the fix, no traceback; exit 2 for a usage error (as argparse), 1 for bad data, no GPU or
a failed run. Counts are microgpt.cu's int: accepted up to 2^31 - 1, refused beyond, and a run of
2^31 - 1 steps or samples builds its tables in bounded chunks (no memory growing with the count)."""
import os
import re
import subprocess
import sys
import tracemalloc
from itertools import islice

import numpy as np
import pytest
from numba import config

from cudakit.gpu import cuda_errors, unavailable_reason
from microgpt_numba import cli, fast, model as reference
from microgpt_numba.arena import FloatArena, Model, Scratch, TrainCache, param_storage_count, scratch_storage_count, \
    train_cache_storage_count
from microgpt_numba.cli import INT_MAX, main, parse_options
from microgpt_numba.dataset import load_dataset
from microgpt_numba.glibc_rand import GlibcRand
from microgpt_numba.model import adam_schedule
from tests.conftest import PYTHONPATH, ROOT

ERROR = "microgpt_numba: error: "


def run_cli(args, env=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return subprocess.run([sys.executable, "-m", "microgpt_numba", *args], capture_output=True, env=env, cwd=ROOT,
                          timeout=timeout)


def one_line_error(capsys, argv, code, *words):
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(ERROR) and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.fixture
def tiny_input(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_bytes(b"ab\nba\n")
    return path


# ---- usage errors: exit 2

@pytest.mark.parametrize("args, words", [
    (["--steps", "0"], ["argument --steps", "from 1 to 2147483647", "'0'"]),
    (["--steps", "-3"], ["argument --steps", "'-3'"]),
    (["--steps", "abc"], ["argument --steps", "'abc'"]),
    (["--steps", "1.5"], ["argument --steps", "'1.5'"]),
    (["--steps", "1e12"], ["argument --steps", "'1e12'"]),
    (["--steps", str(10 ** 12)], ["argument --steps", "largest count microgpt.cu's int holds"]),
    (["--steps", str(2 ** 31)], ["argument --steps", "'2147483648'"]),
    (["--samples", "-1"], ["argument --samples", "from 0 to 2147483647"]),
    (["--samples", str(2 ** 31)], ["argument --samples", "largest count"]),
    (["--samples", "10000000000"], ["argument --samples", "largest count"]),
    (["--temperature", "0"], ["argument --temperature", "finite number > 0"]),
    (["--temperature", "-0.5"], ["argument --temperature", "'-0.5'"]),
    (["--temperature", "nan"], ["argument --temperature", "'nan'"]),
    (["--temperature", "inf"], ["argument --temperature", "'inf'"]),
    (["--temperature", "1e-50"], ["argument --temperature", "'1e-50'"]),  # 0 as a float, as the C's (float)atof
    (["--temperature", "warm"], ["argument --temperature", "'warm'"]),
    (["--temperature", "1_0.5"], ["argument --temperature", "'1_0.5'"]),  # float() reads 10.5, atof 1.0
    (["--temperature", "\u0660.\u0665"], ["argument --temperature"]),  # Arabic-Indic 0.5: atof reads 0
    (["--temperature", "0x1p2000"], ["argument --temperature", "'0x1p2000'"]),
    (["--temperature", "1e-45"], ["argument --temperature", "1.0f / temperature overflows float32"]),
    (["--temperature", "2.9e-39"], ["argument --temperature", "at least 2.939e-39"]),
    (["--temperature", "1e40"], ["argument --temperature", "'1e40'"]),  # past float32: no numpy warning line
    (["--engine", "turbo"], ["argument --engine", "'turbo'", "fast", "reference"]),
    (["--bogus"], ["unknown option '--bogus'"]),
    (["--bogus", "3"], ["unknown option '--bogus'"]),
    (["--step", "3"], ["unknown option '--step'"]),  # no abbreviations: microgpt.cu has none
    (["names.txt"], ["unexpected argument 'names.txt'"]),
    (["--steps"], ["argument --steps", "expected one argument"]),
    (["--samples"], ["argument --samples", "expected one argument"]),
    (["--temperature"], ["argument --temperature", "expected one argument"]),
    (["--input"], ["argument --input", "expected one argument"]),
    (["--engine"], ["argument --engine", "expected one argument"]),
    (["--loss-log"], ["argument --loss-log", "expected one argument"]),
])
def test_usage_error_is_one_line_and_exit_2(args, words, capsys):
    one_line_error(capsys, args, 2, *words, "see python -m microgpt_numba --help")


def test_usage_error_exit_status_from_python_m():
    result = run_cli(["--steps", "1e12"])
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        f"{ERROR}argument --steps: must be an integer from 1 to 2147483647, got '1e12'; "
        "see python -m microgpt_numba --help"]


def test_counts_up_to_the_c_int_are_accepted():
    opts = parse_options(["--steps", str(INT_MAX), "--samples", str(INT_MAX)])
    assert (opts.num_steps, opts.num_samples) == (INT_MAX, INT_MAX)
    opts = parse_options(["--steps", "+7", "--samples", "0", "--temperature", "2", "--steps", "1"])  # the last wins
    assert (opts.num_steps, opts.num_samples, opts.temperature) == (1, 0, np.float32(2.0))
    for text, value in ((" 0x1.8p-1", 0.75), ("0X.8", 0.5), (".5e1", 5.0), ("3.", 3.0)):  # atof's forms
        assert parse_options(["--temperature", text]).temperature == np.float32(value), text
    smallest = parse_options(["--temperature", repr(cli.MIN_TEMPERATURE)]).temperature  # 1/T is float32's largest
    assert np.isfinite(np.float32(1.0) / smallest) and smallest == np.float32(cli.MIN_TEMPERATURE)


def test_help_lists_every_option_with_its_default(capsys):
    assert main(["--help"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    text = " ".join(out.split())  # help wraps with the terminal's width
    options = ["--steps N", "--samples N", "--temperature T", "--input PATH", "--engine {fast,reference}",
               "--loss-log FILE"]
    defaults = ["(default: 1000)", "(default: 20)", "(default: 0.5)", "(default: the names package",
                "(default: fast)", "(default: no log)"]
    starts = [text.index(f"{option} ", text.index("options:")) for option in options]
    for i, (option, default) in enumerate(zip(options, defaults)):
        own = text[starts[i]:starts[i + 1] if i + 1 < len(starts) else len(text)]
        assert default in own, (option, own)
    assert "Exit status: 0 done, 2 a usage error, 1 bad input data" in text


# ---- bad data, no GPU, a failed run: exit 1

def test_missing_input(capsys, tmp_path):
    one_line_error(capsys, ["--input", str(tmp_path / "nope.txt")], 1, "does not exist", "--input")


def test_directory_as_input(capsys, tmp_path):
    one_line_error(capsys, ["--input", str(tmp_path)], 1, "could not read input file", "Is a directory")


def test_input_without_documents(capsys, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n\r\n\n")
    one_line_error(capsys, ["--input", str(blank)], 1, "no non-empty line", "one document per line")


def test_input_whose_lines_end_at_once_at_a_nul(capsys, tmp_path):
    """Documents end at a NUL, as C strings do: lines of NULs are empty documents, and a file of
    only those has nothing to learn (microgpt.cu would train on BOS alone, every loss 0)."""
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"\0\n\0\0\n\0abc\n")
    one_line_error(capsys, ["--input", str(nul)], 1, "no byte before a NUL", "text before any NUL byte")


def test_missing_non_utf8_input_path_is_shown_by_its_bytes(capsys, tmp_path):
    path = os.fsdecode(os.fsencode(tmp_path) + b"/names\xff.txt")
    err = one_line_error(capsys, ["--input", path], 1, "does not exist")
    assert "names\\xff.txt" in err


def test_loss_log_refuses_an_existing_file(capsys, tiny_input, tmp_path):
    log = tmp_path / "losses.csv"
    log.write_text("earlier\n")
    one_line_error(capsys, ["--input", str(tiny_input), "--loss-log", str(log)], 1, "exists", "never overwritten")
    assert log.read_text() == "earlier\n"


def test_loss_log_that_is_a_folder_or_a_device(capsys, tiny_input, tmp_path):
    one_line_error(capsys, ["--input", str(tiny_input), "--loss-log", str(tmp_path)], 1, "is a folder, not a file")
    one_line_error(capsys, ["--input", str(tiny_input), "--loss-log", "/dev/null"], 1,
                   "is a character device, not a file")


def test_loss_log_in_a_missing_folder(capsys, tiny_input, tmp_path):
    one_line_error(capsys, ["--input", str(tiny_input), "--loss-log", str(tmp_path / "no" / "l.csv")], 1,
                   "could not create --loss-log file", "No such file or directory")


def test_a_failed_gpu_run_is_one_line_and_exit_1(capsys, monkeypatch):
    if unavailable_reason() is not None:
        pytest.skip("no GPU and no simulator: the run stops at the GPU check")
    error = cuda_errors()[0]

    def fail(opts, out, err=None):
        raise error("CUDA_ERROR_LAUNCH_FAILED\nunspecified launch failure")

    monkeypatch.setattr(cli, "train", fail)
    one_line_error(capsys, ["--steps", "1"], 1, "the GPU run failed", "unspecified launch failure")


def test_no_cuda_gpu_or_driver():
    """Without the simulator and with no visible device, the CLI refuses before doing any work."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    result = subprocess.run([sys.executable, "-m", "microgpt_numba", "--steps", "1"], capture_output=True,
                            env={**env, "PYTHONPATH": PYTHONPATH, "CUDA_VISIBLE_DEVICES": ""}, cwd=ROOT, timeout=120)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and result.stdout == b""
    assert len(lines) == 1 and lines[0].startswith(ERROR) and "no CUDA GPU or driver found" in lines[0]
    assert "NUMBA_ENABLE_CUDASIM=1" in lines[0] and "take over half an hour" in lines[0] and "--steps 2 --samples 1" in lines[0]


# ---- 2^31 - 1 steps and samples: bounded tables

def test_tables_for_int_max_steps_and_samples_stay_small():
    """Only parsing and table building (no kernel): the chunk plan, every table of the first launches
    and of the last one, the reference engine's first batches, all within a few MB."""
    docs = [b"abcdabcdabcabbdaa", b"c", b"ab"]
    tracemalloc.start()
    try:
        opts = parse_options(["--steps", str(INT_MAX), "--samples", str(INT_MAX)])
        dataset = load_dataset(docs, GlibcRand(42))
        flat, start, positions = fast.document_tokens(dataset, opts.num_steps)
        plan = fast.chunk_plan(opts.num_steps, 1024, 32768)  # the GPU's chunk sizes
        head = list(islice(plan, 3))
        count = 3
        for last in plan:
            count += 1
        assert head == [(0, 1024), (1024, 2048), (3072, 4096)]
        growing = 1024 + 2048 + 4096 + 8192 + 16384
        assert last[0] + last[1] == INT_MAX and 0 < last[1] <= 32768 and count == 5 - (-(INT_MAX - growing) // 32768)
        for first_step, steps in (head[0], head[2], last):
            schedule, rot_start, rot_positions = fast.chunk_tables(start, positions, INT_MAX, first_step, steps)
            assert schedule.shape == (steps, 3)
            assert schedule[-1].tolist() == list(adam_schedule(first_step + steps - 1, INT_MAX))
            doc = first_step % len(docs)  # the launch's step 0 trains document first_step mod count
            assert rot_start[0] == start[doc] and rot_positions[0] == positions[doc]
        batches = reference.step_batches(dataset, opts.num_steps, 100)
        for first_step, token_lists in islice(batches, 3):
            assert len(token_lists) == 100 and token_lists[0] == token_lists[len(docs)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2 ** 20, f"{peak / 2 ** 20:.1f} MiB"


def test_int_max_samples_and_steps_set_up_bounded_buffers(monkeypatch):
    """Generation and the reference engine's StepGraphs/StepTable for 2^31 - 1 (device arrays: the
    simulator's are host memory, so tracemalloc sees them), with the GPU's chunk sizes."""
    if not config.ENABLE_CUDASIM:
        pytest.skip("device arrays are host memory only in the simulator")
    from microgpt_numba.graphs import StepGraphs
    from microgpt_numba.model import StepTable

    monkeypatch.setattr(fast, "FIRST_CHUNK_SAMPLES", 256)
    monkeypatch.setattr(fast, "MAX_CHUNK_SAMPLES", 4096)
    gen = GlibcRand(42)
    dataset = load_dataset([b"ab", b"ba"], gen)
    v = dataset.vocab_size
    tracemalloc.start()
    try:
        arenas = [FloatArena(param_storage_count(v)), FloatArena(train_cache_storage_count(v)),
                  FloatArena(scratch_storage_count(v))]
        model = Model(arenas[0], v, gen)
        layout = fast.Layout(model, arenas[0], TrainCache(arenas[1], v), arenas[1], Scratch(arenas[2], v), arenas[2])
        generation = fast.Generation(layout, dataset, INT_MAX, np.float32(0.5), gen)
        assert generation.cap == 4096 and generation.first_uniforms.shape == (256 * 16,)
        graphs = StepGraphs(min(INT_MAX, reference.PRINT_EVERY))
        first, token_lists = next(reference.step_batches(dataset, INT_MAX, 100))
        StepTable(token_lists, INT_MAX, INT_MAX - 100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert graphs.target_probs.shape[0] <= 100
    assert peak < 20 * 2 ** 20, f"{peak / 2 ** 20:.1f} MiB"


def test_corpus_line_escapes_what_would_break_it():
    """A name's backslash, newline and other control bytes escaped (so that two names never print
    alike, and the line stays one), its other bytes as they are."""
    assert cli.escaped(b"a\\b\nc\x1b\xff\td") == b"a\\\\b\\nc\\x1b\xff\\td"
    assert cli.escaped(b"a\\n") != cli.escaped(b"a\n")


# ---- a file whose name is not UTF-8, and the loss log (one short simulator run)

@pytest.mark.slow
def test_non_utf8_input_path_and_loss_log(tmp_path):
    folder = os.fsencode(tmp_path)
    path, log = folder + b"/names\xff\n.txt", folder + b"/losses\xfe.csv"
    with open(path, "wb") as f:
        f.write(b"ab\nba\nabc\n")
    result = run_cli([b"--input", path, b"--steps", b"2", b"--samples", b"0", b"--loss-log", log])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split(b"\n")
    assert lines[0] == b"corpus: " + path.replace(b"\n", b"\\n")  # the name's bytes, its newline escaped
    printed = [re.fullmatch(rb"step    (\d) /    2 \| loss (\d\.\d{4})", line) for line in lines if
               line.startswith(b"step")]
    assert [m.group(1) for m in printed] == [b"1", b"2"]
    with open(log, "rb") as f:
        rows = f.read().decode().splitlines()
    assert rows[0] == "step,loss,loss_hex" and len(rows) == 3
    for row, m in zip(rows[1:], printed):
        step, loss, exact = row.split(",")
        value = float.fromhex(exact)
        assert step == m.group(1).decode() and loss == m.group(2).decode() == "%.4f" % value
        assert float(np.float32(value)) == value  # a float32, exactly

    again = run_cli([b"--input", path, b"--loss-log", log])
    err = again.stderr.decode().splitlines()
    assert again.returncode == 1 and again.stdout == b"" and len(err) == 1
    assert err[0].startswith(ERROR) and "losses\\xfe.csv" in err[0] and "exists" in err[0]
    with open(log, "rb") as f:
        assert f.read().decode().splitlines() == rows


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_input_that_is_not_a_file(capsys, tmp_path, kind):
    """A FIFO would block the read and /dev/zero never end it: refused before they are opened."""
    path = tmp_path / "docs.txt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    one_line_error(capsys, ["--input", str(path)], 1, "is a FIFO" if kind == "fifo" else "is a character device",
                   "not a file", "regular text file")


def test_stdout_closed():
    r = subprocess.run(f"exec {sys.executable!r} -m microgpt_numba --steps 1 --samples 1 >&-", shell=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": PYTHONPATH}, cwd=ROOT, timeout=300)
    want = f"{ERROR}stdout is closed: run with an open stdout (a terminal, a pipe, or > FILE)\n"
    assert r.returncode == 1 and r.stderr == want.encode(), r.stderr


def test_simulator_flag_that_is_not_an_integer():
    r = run_cli(["--steps", "1"], {"NUMBA_ENABLE_CUDASIM": "yes"})
    assert r.returncode == 2 and r.stderr == (f"{ERROR}NUMBA_ENABLE_CUDASIM='yes' is not an integer: set it to 1 for "
                                              "Numba's CPU simulator, or unset it\n").encode(), r.stderr
