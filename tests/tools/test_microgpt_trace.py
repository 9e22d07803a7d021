"""tools/microgpt_trace.py's plumbing, in the simulator: our engine's trace replays on our kernels
bit for bit, a flipped bit is found at its op, fit finds our summation order, compare finds the
first difference; patch instruments the real seed (and compiles where nvcc and cuBLAS are); bad
input gives one line. The real comparison with microgpt.cu needs a GPU: the forensics subcommand.

The simulator starts a thread per CUDA thread, so a step of two positions takes 7-15 s on two
cores: the module traces one run of two steps, which the tests marked slow share.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import microgpt_trace as mt
from cudakit.gpu import unavailable_reason
from tests.conftest import ROOT, SHARED

SEED = SHARED / "seeds" / "microgpt.cu"


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    if unavailable_reason() is not None:
        pytest.skip(f"kernels cannot run here ({unavailable_reason()}); set NUMBA_ENABLE_CUDASIM=1")
    folder = tmp_path_factory.mktemp("trace")
    (folder / "names.txt").write_bytes(b"a\nb\nc\n")  # one-letter names: two positions a step
    path = folder / "ours.trace"
    assert mt.main(["ours", "--input", str(folder / "names.txt"), "--steps", "2", "--trace-steps", "1:2",
                    "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def trace(trace_path):
    return mt.Trace(trace_path)


def flipped(path, tmp_path, at, name="flipped.trace"):
    """A copy of the trace with the lowest bit of the float at byte `at` flipped."""
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


@pytest.mark.slow
def test_our_trace_holds_every_step_and_every_c_operation(trace):
    assert (trace.num_steps, sorted(trace.states), sorted(trace.snapshots)) == (2, [0, 1], [1])
    assert {op.name for op in trace.ops[1]} == set(mt.OPS)  # memset: zero_attention_accums
    assert [op.index for op in trace.ops[1]] == list(range(len(trace.ops[1])))


@pytest.mark.slow
def test_our_trace_replays_bit_for_bit_on_our_kernels(trace):
    report = mt.replay(trace)
    assert report["ops"] == len(trace.ops[1]) and report["mismatched_ops"] == 0, report["first_mismatch"]
    assert report["stray_writes"] == 0
    assert report["steps"] == [{"step": 1, "ops": report["ops"], "unrecorded_writes": [], "complete": True}]


@pytest.mark.slow
def test_a_flipped_output_bit_is_reported_at_its_op(trace, trace_path, tmp_path):
    # the last lm_head matvec's output is read by no later matvec, so only it can differ
    op = [op for op in trace.ops[1] if op.name == "matvec"][-1]
    report = mt.replay(mt.Trace(flipped(trace_path, tmp_path, op.outs[0].at + 4)), only={"matvec"})
    assert report["mismatched_ops"] == 1
    first = report["first_mismatch"]
    assert (first["op_index"], first["position"], first["mismatched_elements"]) == (op.index, 1, 1)
    assert first["mismatches"][0]["element"] == "pos[1].logits[1]"
    assert float.fromhex(first["mismatches"][0]["c"]) != float.fromhex(first["mismatches"][0]["ours"])


@pytest.mark.slow
def test_fit_finds_our_summation_order_in_our_trace(trace):
    """Our cuBLAS stand-ins sum as cuBLAS was traced to (microgpt_numba/kernels.py): fit must say so."""
    classes = mt.fit(trace)["classes"]
    assert {c["call"] for c in classes} == {"sgemv_T", "sgemv_N", "sger"}
    for c in classes:
        ours = "fma" if c["call"] == "sger" else "chunk32_tree_fma" if (c["call"], c["m"]) == ("sgemv_T", 64) \
            else "chunk2_tree_fma"
        assert c["matches"][ours] == c["outputs"], c
        if c["call"] != "sger":  # and the order shows: plain ascending sums give other bits
            assert c["matches"]["seq_asc_fma"] < c["outputs"], c


def exact_fma(a, b, c):
    """float32(a * b + c) rounded once (to nearest, ties to even), from the exact rational value."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = np.float32(float(exact))  # rounded twice: the answer is near or its neighbour towards exact
    other = np.nextafter(near, np.float32(np.inf if Fraction(float(near)) <= exact else -np.inf))
    d_near, d_other = abs(exact - Fraction(float(near))), abs(exact - Fraction(float(other)))
    if d_near != d_other:
        return near if d_near < d_other else other
    return near if near.view(np.uint32) % 2 == 0 else other


def test_fma32_rounds_once_even_where_the_double_sum_is_a_tie():
    one = np.float32(1.0)
    # a * b is 2^-24 plus (above) or minus (below) a hair, so the double sum is the float32 midpoint
    a = np.array([(2**23 + 2891) * 2.0**-23, (2**23 + 1) * 2.0**-23], dtype=np.float32)
    b = np.array([(2**23 - 2890) * 2.0**-47, (2**23 - 1) * 2.0**-47], dtype=np.float32)
    c = np.array([one, one + np.float32(2.0**-23)], dtype=np.float32)
    assert list(mt.fma32(a, b, c)) == [one + np.float32(2.0**-23)] * 2
    assert list(np.float32(a.astype(np.float64) * b + c)) != list(mt.fma32(a, b, c))  # the naive double rounding
    rng = np.random.default_rng(1)
    x, y, z = (rng.standard_normal(2000).astype(np.float32) for _ in range(3))
    assert [float(v) for v in mt.fma32(x, y, z)] == [float(exact_fma(*t)) for t in zip(x, y, z)]


def test_candidate_orders_sum_as_their_names_say():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((3, 27)).astype(np.float32) for _ in range(2))
    found = mt.candidates(a, b, None)
    for row in range(3):
        def chain(ks, acc=np.float32(0.0)):
            for k in ks:
                acc = exact_fma(a[row, k], b[row, k], acc)
            return acc

        assert found["seq_desc_fma"][row] == chain(range(26, -1, -1))
        halves = [chain(range(0, 14)), chain(range(14, 27))]  # ceil(27 / 2) terms, then the rest
        assert found["chunk2_seq_fma"][row] == halves[0] + halves[1]
        quarters = [chain(range(p, 27, 4)) for p in range(4)]
        assert found["stride4_tree_fma"][row] == (quarters[0] + quarters[2]) + (quarters[1] + quarters[3])
        assert found["stride4_pairs_fma"][row] == (quarters[0] + quarters[1]) + (quarters[2] + quarters[3])
        products = [a[row, k] * b[row, k] for k in range(27)]
        assert found["seq_asc_mul"][row] == np.add.accumulate(products, dtype=np.float32)[-1]
    assert len(found) == 2 * (2 + 5 * 2 * 3)


@pytest.mark.slow
def test_compare_names_the_first_differing_step_element_and_loss(trace, trace_path, tmp_path):
    same = mt.compare(trace, trace)
    assert (same["first_state_difference"], same["first_loss_difference"], same["first_op_difference"]) == (None,) * 3
    layout = mt.Layout(trace)
    start = next(offset for offset, label, _ in layout.fields[0] if label == "attn_wk.m")
    state = trace.states[1]
    changed = flipped(trace_path, tmp_path, state.at + 4 * (start + 2 * 16 + 3))
    data = bytearray(changed.read_bytes())
    data[trace.states[0].at - 4:trace.states[0].at] = np.float32(trace.states[0].loss + 0.01).tobytes()
    changed.write_bytes(data)
    diff = mt.compare(trace, mt.Trace(changed))
    first = diff["first_state_difference"]
    assert (first["step"], first["element"], first["differing_elements"]) == (1, "attn_wk.m[2,3]", 1)
    assert first["a"] == mt.hexf(state.param[start + 35]) != first["b"]
    assert diff["first_loss_difference"]["step"] == 0 and diff["max_loss_difference"] == pytest.approx(0.01, 1e-3)
    assert diff["first_op_difference"] is None


@pytest.mark.slow
def test_compare_names_the_first_differing_op(trace, trace_path, tmp_path):
    op = trace.ops[1][5]
    diff = mt.compare(trace, mt.Trace(flipped(trace_path, tmp_path, op.outs[0].at)))["first_op_difference"]
    assert (diff["kind"], diff["op_index"], diff["name"]) == ("output", 5, op.name)


@pytest.fixture
def seed():
    if not SEED.is_file():
        pytest.skip(f"{SEED} is not here (../shared/seeds holds microgpt.cu)")
    return SEED.read_text()


def test_patch_wraps_every_launch_of_the_seed(seed, tmp_path):
    out = tmp_path / "microgpt_trace.cu"
    assert mt.main(["patch", "--seed", str(SEED), "--out", str(out)]) == 0
    patched = out.read_text()
    for name in mt.OPS:
        if name != "memset":
            fn = mt.c_function(name)
            assert patched.count(f"static void orig_{fn}(") == 1 and f"    orig_{fn}(" in patched, name
        assert f'trace_op("{name}"' in patched
    assert patched.count("trace_memset(cache->grad_") == 2
    # undoing the additions and renames gives the seed back: its arithmetic is untouched
    added = patched[patched.index("\n/* ---- microgpt_trace"):patched.index("static int tokenize_doc(")]
    restored = patched.replace(added, "")
    restored = re.sub(r"^ *trace_(options|start|step_start|step_end|finish)\(.*\);\n", "", restored, flags=re.M)
    restored = re.sub(r"trace_memset\((.*?), (.*)\);", r"CHECK_CUDA(cudaMemset(\1, 0, \2));", restored)
    assert restored.replace("static void orig_", "static void ") == seed
    compile_or_skip(out, tmp_path)


def compile_or_skip(source, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    probe = subprocess.run(["nvcc", "-E", "-x", "cu", "-", "-o", "/dev/null"], input="#include <cublas_v2.h>\n",
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip("nvcc finds no cuBLAS headers (cublas_v2.h; NVCC_APPEND_FLAGS=-I... adds a folder)")
    built = subprocess.run([*mt.NVCC, "-c", "-o", str(tmp_path / "microgpt_trace.o"), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_patch_refuses_a_seed_that_changed(seed, tmp_path, capsys):
    other = tmp_path / "other.cu"
    other.write_text(seed.replace("float *y, int rows, int cols)", "float *y, int cols, int rows)"))
    assert mt.main(["patch", "--seed", str(other), "--out", str(tmp_path / "x.cu")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "launch_matvec takes" in err


@pytest.mark.parametrize("case", ["truncated", "magic", "missing trace", "missing seed", "empty corpus", "steps"])
def test_bad_input_gives_one_line_and_exit_1_or_2(case, tmp_path, capsys):
    # a bad file is bad data (1), a bad option a usage error (2): the README's rule for every tool
    bad = tmp_path / "bad.trace"
    writer = mt.TraceWriter(bad, 3, 1, (4, 2, 1))
    writer.state(0, np.float32(1.5), np.zeros(4, dtype=np.float32))
    writer.close()
    bad.with_name("empty.txt").write_bytes(b"\n\n")
    if case == "truncated":
        bad.write_bytes(bad.read_bytes()[:-6])
    elif case == "magic":
        bad.write_bytes(b"MGTRACE0" + bad.read_bytes()[8:])
    argv = {"missing seed": ["patch", "--seed", str(tmp_path / "nope.cu"), "--out", str(tmp_path / "x.cu")],
            "missing trace": ["replay", str(tmp_path / "nope.trace")],
            "empty corpus": ["ours", "--input", str(bad.with_name("empty.txt")), "--out", str(tmp_path / "new" / "o")],
            "steps": ["ours", "--input", "x", "--trace-steps", "3:1", "--out", str(bad)]}.get(case, ["fit", str(bad)])
    assert mt.main(argv) == (2 if case == "steps" else 1)
    err = capsys.readouterr().err
    assert err.startswith("microgpt_trace.py: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert {"truncated": "truncated", "magic": "not a microgpt trace", "missing trace": "cannot read trace",
            "missing seed": "cannot read the seed", "empty corpus": "no non-empty line", "steps": "A:B"}[case] in err
    assert not (tmp_path / "new").exists()  # --out's folders are made only to write into


def small_trace(path):
    writer = mt.TraceWriter(path, 3, 1, (4, 2, 1))
    writer.state(0, np.float32(1.5), np.zeros(4, dtype=np.float32))
    writer.close()
    return path


def test_a_fifo_or_a_device_is_refused(tmp_path):
    # open() of a FIFO blocked for ever: in a subprocess, so that a hang fails the test.
    os.mkfifo(tmp_path / "fifo")
    for argv, kind in ((["fit", str(tmp_path / "fifo")], "a FIFO"), (["compare", "/dev/zero", "/dev/zero"],
                                                                      "a character device"),
                       (["patch", "--seed", str(tmp_path / "fifo"), "--out", str(tmp_path / "x.cu")], "a FIFO")):
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "microgpt_trace.py"), *argv], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and kind in done.stderr, done.stderr
    assert not (tmp_path / "x.cu").exists()


def test_out_paths_are_checked_first(tmp_path, capsys):
    bad = small_trace(tmp_path / "t.trace")
    (tmp_path / "file").write_text("user file")
    # Path('') is the current folder; a file above --out failed only after the work, with exit 1.
    assert mt.main(["fit", str(bad), "--out", ""]) == 2
    assert mt.main(["fit", str(bad), "--out", str(tmp_path / "file" / "fit.json")]) == 1
    assert mt.main(["ours", "--input", str(tmp_path / "none.txt"), "--steps", "0", "--out", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("microgpt_trace.py: error: ") for line in err), err
    assert "empty" in err[0] and "file is a file" in err[1] and "positive integer" in err[2]


def test_out_never_replaces_an_input_and_a_file_only_with_force(tmp_path, capsys):
    # each of these wrote over the file: a corpus with the patched .cu, an input with its own trace,
    # a user's file with a report
    bad = small_trace(tmp_path / "t.trace")
    corpus = tmp_path / "names.txt"
    corpus.write_bytes(b"a\nb\n")
    keep = tmp_path / "keep.txt"
    keep.write_text("keep")
    assert mt.main(["ours", "--input", str(corpus), "--steps", "1", "--out", str(corpus), "--force"]) == 1
    assert mt.main(["fit", str(bad), "--out", str(bad), "--force"]) == 1
    assert mt.main(["compare", str(bad), str(bad), "--out", str(keep)]) == 1
    assert mt.main(["patch", "--seed", str(SEED), "--out", str(keep)]) == 1
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "old.md").write_text("old")
    assert mt.main(["forensics", "--seed", str(SEED), "--input", str(corpus), "--trace-steps", "0:1",
                    "--out", str(tmp_path / "report")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("microgpt_trace.py: error: --out ") for line in err), err
    assert "the input this reads" in err[0] and "the trace this reads" in err[1], err
    assert all("--force" in line for line in err[2:]), err
    assert corpus.read_bytes() == b"a\nb\n" and keep.read_text() == "keep"


def test_out_in_a_missing_folder_is_made(trace_path, tmp_path):
    # unwritable() lets missing folders through, as the other tools make them; this one then
    # failed on them after the work
    out = tmp_path / "new" / "deeper" / "compare.json"
    assert mt.main(["compare", str(trace_path), str(trace_path), "--out", str(out)]) == 0
    assert json.loads(out.read_text())


def test_failed_forensics_says_so_in_one_line(seed, tmp_path, capsys, monkeypatch):
    # it exited 1 with nothing on stderr: only report.md told that the build and our run had failed
    def fail(*args):
        raise mt.RunError("no CUDA GPU or driver found")

    monkeypatch.setattr(mt, "build", fail)
    monkeypatch.setattr(mt, "run_ours", fail)
    (tmp_path / "names.txt").write_bytes(b"a\nb\n")
    assert mt.main(["forensics", "--seed", str(SEED), "--input", str(tmp_path / "names.txt"), "--trace-steps", "0:1",
                    "--out", str(tmp_path / "report"), "--work", str(tmp_path / "work")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("microgpt_trace.py: error: forensics: stage build, ours failed") and err.count("\n") == 1
    assert "no CUDA GPU" in err and "report.md" in err and (tmp_path / "report" / "report.md").is_file()
