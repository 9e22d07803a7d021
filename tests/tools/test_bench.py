"""tools/bench.py's driver: `all` runs every entry into one folder, one entry failing leaves the
others' files and a non-zero exit, and earlier results are never overwritten. The entries
themselves need a GPU (they run on the device machine); stand-ins replace them here."""
import json

import pytest

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
    assert err == "bench: nvcc is not on PATH; run on a machine with the CUDA toolkit\n"


def test_earlier_results_are_kept(entries, tmp_path, capsys):
    (tmp_path / "bench_b_fine.json").write_text("earlier")
    assert bench.main(["b_fine", "--out", str(tmp_path)]) == 1
    assert (tmp_path / "bench_b_fine.json").read_text() == "earlier" and entries == []
    assert "already holds bench_b_fine results; pass a new --out folder" in capsys.readouterr().err


def one_line(capsys, argv, code, *words):
    assert bench.main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench: ") and "Traceback" not in err, err
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
    (["b_fine", "--assets", ""], ["--assets", "empty"]),
])
def test_usage_errors_are_one_line_exit_2(entries, tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    one_line(capsys, argv, 2, "bench: error: ", *words)
    assert entries == [] and not any(tmp_path.iterdir())
