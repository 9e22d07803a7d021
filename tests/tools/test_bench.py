"""tools/bench.py's driver: `all` runs every entry into one folder, one entry failing leaves the
others' files and a non-zero exit, and earlier results are never overwritten. The entries
themselves need a GPU (they run on the device machine); stand-ins replace them here."""
import json

import pytest
from numba import config

import bench


@pytest.fixture
def entries(monkeypatch):
    calls = []

    def fine(args, out_dir, save):
        calls.append("fine")
        return {"runs": {"x": 1}}

    def broken(args, out_dir, save):
        calls.append("broken")
        raise bench.BenchError("nvcc is not on PATH; run on a machine with the CUDA toolkit")

    monkeypatch.setattr(bench, "ENTRIES", {"a_broken": (broken, str), "b_fine": (fine, lambda r: "| table |")})
    return calls


def test_all_runs_every_entry_and_reports_a_failure(entries, tmp_path, capsys):
    assert bench.main(["all", "--out", str(tmp_path)]) == 1
    assert entries == ["broken", "fine"]
    saved = json.loads((tmp_path / "bench_b_fine.json").read_text())
    assert saved["runs"] == {"x": 1} and saved["command"].endswith(f"tools/bench.py all --out {tmp_path}")
    assert "| table |" in (tmp_path / "bench_b_fine.md").read_text()
    assert not (tmp_path / "bench_a_broken.json").exists()
    err = capsys.readouterr().err
    assert err == "bench: error: nvcc is not on PATH; run on a machine with the CUDA toolkit\n"


def test_earlier_results_are_kept(entries, tmp_path, capsys):
    (tmp_path / "bench_b_fine.json").write_text("earlier")
    assert bench.main(["b_fine", "--out", str(tmp_path)]) == 1
    assert (tmp_path / "bench_b_fine.json").read_text() == "earlier" and entries == []
    assert "already holds bench_b_fine results; pass a new --out folder" in capsys.readouterr().err


def test_a_run_that_measured_nothing_leaves_no_new_folder(entries, tmp_path, capsys):
    assert bench.main(["a_broken", "--out", str(tmp_path / "new")]) == 1
    assert not (tmp_path / "new").exists() and "results in" not in capsys.readouterr().out
    assert bench.main(["a_broken", "--out", str(tmp_path)]) == 1 and tmp_path.is_dir()  # not one it did not make
    assert "results in" not in capsys.readouterr().out  # it said so of the folder it had not written in


def one_line(capsys, argv, code, *words):
    assert bench.main(argv) == code
    err = capsys.readouterr().err
    # every error is `bench: error: ...`: bad data and a failed entry had no `error:`
    assert err.count("\n") == 1 and err.startswith("bench: error: ") and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_an_out_that_cannot_be_a_folder_is_one_line(entries, tmp_path, capsys):
    # NotADirectoryError and FileExistsError tracebacks, before any entry ran.
    (tmp_path / "file").write_text("user file")
    one_line(capsys, ["b_fine", "--out", str(tmp_path / "file" / "sub")], 1, "--out", "file/sub")
    one_line(capsys, ["b_fine", "--out", str(tmp_path / "file")], 1, "--out", "not a folder")
    assert entries == [] and (tmp_path / "file").read_text() == "user file"


@pytest.mark.parametrize("argv, words", [
    (["bogus"], ["invalid choice", "bench.py --help"]),  # argparse's five lines of usage before
    (["b_fine", "--steps", "-5"], ["--steps", "positive"]),
    (["b_fine", "--repeat", "0"], ["--repeat", "positive"]),
    (["b_fine", "--steps", "10", "10"], ["--steps", "twice"]),  # a zero division in the marginal rate
    (["b_fine", "--engines", "turbo"], ["--engines", "invalid choice"]),
    (["b_fine", "--peers", "eager,bogus"], ["--peers", "bogus"]),
    (["b_fine", "--out", ""], ["--out", "empty"]),
    (["b_fine", "--step", "3"], ["unrecognized arguments: --step"]),  # flags whole only
    (["b_fine", "--assets", ""], ["--assets", "empty"]),
])
def test_usage_errors_are_one_line_exit_2(entries, tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    one_line(capsys, argv, 2, "bench: error: ", *words)
    assert entries == [] and not any(tmp_path.iterdir())


def test_llmc_timings_are_read_from_llmc_bench_lines():
    """The lines as llmc_bench.cu's report() prints them (its format string, with made-up figures):
    forward and forward + backward per TF32 mode; the other lines are not timings of these two."""
    import bench_peers

    out = "\n".join([
        "device: NVIDIA H200 (sm_90), CUDA runtime 13000, driver 13000, cuBLAS 130000",
        "llm.c fp32 B=1 T=64 tf32=off loss: 10.987654",
        "llm.c fp32 B=1 T=64 tf32=off forward (logits) ms: 10.500  (median of 5 back-to-back means of 20; "
        "per-call median 10.4 min 10.1 mean 10.6 over 100)",
        "llm.c fp32 B=1 T=64 tf32=off forward+loss ms: 10.700  (median of 5 back-to-back means of 20; ...)",
        "llm.c fp32 B=1 T=64 tf32=off fwd+bwd (forward+loss, zero_grad, backward) ms: 13.250  (median ...)",
        "llm.c fp32 B=1 T=64 tf32=off fwd+bwd without zero_grad ms: 12.900  (median ...)",
        "llm.c fp32 B=1 T=64 tf32=on forward (logits) ms: 10.250  (median ...)",
        "llm.c fp32 B=1 T=64 tf32=on fwd+bwd (forward+loss, zero_grad, backward) ms: 12.500  (median ...)",
        "llm.c fp32 B=1 T=64 tf32=on train step (fwd+bwd+AdamW) ms: 14.000  (median ...)",
    ])
    assert bench_peers.parse_llmc(out) == {
        "llm.c fp32 (row-guarded), TF32 off": {"forward_ms": 10.5, "forward_backward_ms": 13.25},
        "llm.c fp32 (row-guarded), TF32 on": {"forward_ms": 10.25, "forward_backward_ms": 12.5}}
    assert bench_peers.parse_llmc("llmc_bench: bad arguments\n") == {}


def test_llmc_without_the_peers_folder_is_skipped_with_a_reason(tmp_path):
    got = bench.time_llmc(tmp_path / "no_peers", tmp_path / "model.safetensors", tmp_path / "data",
                                tmp_path / "build")
    assert list(got) == ["skipped"] and "no_peers" in got["skipped"] and "peers folder" in got["skipped"]


def test_tf_with_missing_assets_is_one_line(tmp_path, capsys):
    """The real tf entry: in the simulator (CI) it stops at the GPU check, on a GPU at the missing
    assets. Either way one line and exit 1."""
    one_line(capsys, ["tf", "--out", str(tmp_path / "out"), "--assets", str(tmp_path / "missing")], 1,
             "bench: error: tf: ")


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="on a GPU the bench would write and time GPT-2")
def test_tf_without_a_gpu_writes_nothing(tmp_path, capsys):
    """Without a GPU the tf entry stops before it writes 500 MB of synthetic weights into --out."""
    one_line(capsys, ["tf", "--out", str(tmp_path / "out")], 1, "bench: error: tf: ", "CUDA GPU")
    assert not (tmp_path / "out" / "assets").exists()


def test_tf_assets_left_in_out_are_one_line(tmp_path, capsys, monkeypatch):
    """A folder left by an interrupted run holds synthetic weights, perhaps partial: the bench
    refuses it in one line and leaves it (past the GPU check, which a stand-in passes here)."""
    (tmp_path / "out" / "assets").mkdir(parents=True)
    (tmp_path / "out" / "assets" / "enc").write_bytes(b"earlier")
    monkeypatch.setattr(bench, "unavailable_reason", lambda simulator_ok=True: None)
    one_line(capsys, ["tf", "--out", str(tmp_path / "out")], 1, "left from an earlier run", "pick a new --out")
    assert (tmp_path / "out" / "assets" / "enc").read_bytes() == b"earlier"
