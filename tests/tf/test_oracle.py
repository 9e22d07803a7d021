"""tools/tf_oracle.py and its fixtures: tf.c, rebuilt here, must reproduce them bit for bit."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tf_oracle
from tf_assets import ToolError
from tf_numba.checkpoints import checkpoints
from tf_numba.config import GPT2, TINY, Config
from tests.conftest import FIXTURES, ROOT

SUMS = {name: FIXTURES / f"tf_oracle_{name}.json" for name in ("tiny_fma", "tiny_nofma", "gpt2_fma", "gpt2_nofma")}
C_HEX = re.compile(r"^-?0x[01](\.[0-9a-f]*[1-9a-f])?p[-+]\d+$")  # C's %a: no trailing zeros


def load(path):
    return json.loads(Path(path).read_text())


@pytest.mark.parametrize("path", [*SUMS.values(), FIXTURES / "tf_c_constants.json"], ids=lambda p: p.name)
def test_fixture_labels_counts_and_hex(path):
    record = load(path)
    config = dict(record["config"])
    input_size = config.pop("input_size")
    assert [(c["label"], c["count"]) for c in record["checkpoints"]] == checkpoints(Config(**config), input_size)
    assert all(C_HEX.match(c["sum"]) for c in record["checkpoints"])
    assert record["command"].startswith("python tools/tf_oracle.py ") and record["fp_model"] in ("fma", "nofma")


def test_fixture_configs():
    for name, cfg, input_size in [("tiny", TINY, 8), ("gpt2", GPT2, 64)]:
        for fp_model in ("fma", "nofma"):
            record = load(SUMS[f"{name}_{fp_model}"])
            assert record["config"] == {**cfg.__dict__, "input_size": input_size}
            assert record["fp_model"] == fp_model


@pytest.mark.parametrize("name", ["tiny", "gpt2"])
def test_profiles_differ_from_the_second_checkpoint(name):
    fma, nofma = (load(SUMS[f"{name}_{p}"])["checkpoints"] for p in ("fma", "nofma"))
    # The embedding is a plain add; everything after it holds a product that contraction fuses.
    assert fma[0]["sum"] == nofma[0]["sum"]
    differ = [a["sum"] != b["sum"] for a, b in zip(fma[1:], nofma[1:])]
    # At most one later sum may coincide: the tiny loss, a float sum of 8 logs, does.
    assert differ[0] and sum(differ) >= len(differ) - 1


def test_seed_constants_fixture_is_the_seed(tf_c):
    record = load(FIXTURES / "tf_c_constants.json")
    assert [c["sum"] for c in record["checkpoints"]] == tf_oracle.seed_constants(tf_c)


@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_tiny_oracle_reproduces_fixtures(tf_c, tiny_assets, tiny_input_size, fp_model):
    generate = 24 if fp_model == "fma" else None
    record, generation = tf_oracle.run_oracle(tf_c, tiny_assets, fp_model, tiny_input_size, generate)
    fixture = load(SUMS[f"tiny_{fp_model}"])
    assert record["assets"] == fixture["assets"]
    assert record["checkpoints"] == fixture["checkpoints"]
    timers = record["tf_c_seconds"]  # tf.c's own forward and backward totals, for tools/bench.py
    assert timers["forward"] > 0 and timers["backward"] > 0
    if generation is not None:
        expected = load(FIXTURES / "tf_oracle_tiny_generate.json")
        assert (generation["prompt"], generation["tokens"]) == (expected["prompt"], expected["tokens"])
        assert len(expected["tokens"]) == 24 and len(expected["prompt"]) == TINY.d_seq - 24


def test_missing_clang_is_one_clear_error(tf_c, tiny_assets, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError, match="clang is not installed"):
        tf_oracle.run_oracle(tf_c, tiny_assets, "fma", 8)


def test_a_different_tf_c_is_refused(tf_c, tiny_assets, tmp_path):
    edited = tmp_path / "tf.c"
    edited.write_text(tf_c.read_text().replace("layer_i == 11", "layer_i == 10", 1))
    with pytest.raises(ToolError, match="does not look like the seed"):
        tf_oracle.run_oracle(edited, tiny_assets, "fma", 8)


def one_line_error(capsys, code, argv, *words):
    """tf_oracle.py fails with exit status `code` and one line `tf_oracle.py: error: ...` holding words."""
    try:
        rc = tf_oracle.main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == code and err.count("\n") == 1 and err.startswith("tf_oracle.py: error: "), (rc, err)
    for word in words:
        assert word in err, err


def test_cli_errors_are_one_line(tiny_assets, tmp_path, capsys):
    out = tmp_path / "out.json"
    out.write_text("user file")
    one_line_error(capsys, 1, ["--tf-c", "x.c", "--assets", str(tiny_assets), "--out", str(out)], "--force")
    assert out.read_text() == "user file"
    one_line_error(capsys, 1, ["--tf-c", str(tmp_path / "none.c"), "--assets", str(tiny_assets),
                               "--out", str(tmp_path / "new.json")], "none.c", "--tf-c")
    assert not (tmp_path / "new.json").exists()


def test_usage_errors_are_one_line_exit_2(tmp_path, capsys):
    one_line_error(capsys, 2, ["--tf-c", "x.c"], "--out")
    one_line_error(capsys, 2, ["--tf-c", "x.c", "--assets", str(tmp_path), "--out", str(tmp_path / "o.json"),
                               "--generate", "4"], "--generate-out")


def test_bad_assets_are_read_by_tf_numba(tiny_assets, tmp_path, capsys):
    # The package's reader and its one-line errors, before clang is needed.
    shutil.copytree(tiny_assets, tmp_path / "assets")
    (tmp_path / "tf.c").write_text("/* not read this far */")
    (tmp_path / "assets" / "data").write_bytes(b"\0")
    argv = ["--tf-c", str(tmp_path / "tf.c"), "--assets", str(tmp_path / "assets"), "--out", str(tmp_path / "o.json")]
    one_line_error(capsys, 1, argv, "data", "odd length")
    (tmp_path / "assets" / "model.safetensors").unlink()
    (tmp_path / "assets" / "model.safetensors").mkdir()
    one_line_error(capsys, 1, argv, "model.safetensors", "Is a directory")
    assert not (tmp_path / "o.json").exists()


def test_the_same_file_for_both_outputs_is_refused(tiny_assets, tmp_path, capsys):
    # It ran tf.c twice and failed on the second write; with --force the checkpoints were replaced.
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    base = ["--tf-c", str(tmp_path / "none.c"), "--assets", str(tiny_assets), "--generate", "4"]
    for force in ([], ["--force"]):
        for other in (tmp_path / "o.json", tmp_path / "link" / "o.json", tmp_path / "sub" / ".." / "o.json"):
            argv = base + ["--out", str(tmp_path / "o.json"), "--generate-out", str(other), *force]
            one_line_error(capsys, 2, argv, "--generate-out", "same file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]


def test_every_output_is_checked_before_any_work(tiny_assets, tmp_path, capsys):
    # Checked before tf.c is read (none.c does not exist), and before minutes of clang and tf.c.
    (tmp_path / "file").write_text("user file")
    (tmp_path / "folder").mkdir()
    base = ["--tf-c", str(tmp_path / "none.c"), "--assets", str(tiny_assets), "--force"]
    one_line_error(capsys, 1, base + ["--out", str(tmp_path / "file" / "o.json")], "file is a file", "--out")
    one_line_error(capsys, 1, base + ["--out", str(tmp_path / "folder")], "it is a folder", "--out")
    one_line_error(capsys, 1, base + ["--out", str(tmp_path / "o.json"), "--generate", "4",
                                      "--generate-out", str(tmp_path / "file" / "g.json")], "--generate-out")
    assert not (tmp_path / "o.json").exists() and (tmp_path / "file").read_text() == "user file"


def test_an_output_is_never_an_input(tiny_assets, tmp_path, capsys):
    # --seed-constants --force wrote its JSON over the seed tf.c it had just read
    tf_c = tmp_path / "tf.c"
    tf_c.write_text("/* the seed */")
    shutil.copytree(tiny_assets, tmp_path / "assets")
    one_line_error(capsys, 1, ["--tf-c", str(tf_c), "--seed-constants", "--out", str(tf_c), "--force"],
                   "--out", "the --tf-c this reads")
    one_line_error(capsys, 1, ["--tf-c", str(tf_c), "--assets", str(tmp_path / "assets"),
                               "--out", str(tmp_path / "o.json"), "--generate", "4",
                               "--generate-out", str(tmp_path / "assets" / "data"), "--force"],
                   "--generate-out", "the assets' data this reads")
    assert tf_c.read_text() == "/* the seed */" and not (tmp_path / "o.json").exists()
    assert (tmp_path / "assets" / "data").read_bytes() == (tiny_assets / "data").read_bytes()


def test_empty_paths_and_counts_are_usage_errors(tiny_assets, tmp_path, capsys):
    good = ["--tf-c", "x.c", "--assets", str(tiny_assets)]
    one_line_error(capsys, 2, good + ["--out", ""], "--out", "empty")  # Path('') is the current folder
    one_line_error(capsys, 2, ["--tf-c", "", "--assets", str(tiny_assets), "--out", "o.json"], "--tf-c", "empty")
    one_line_error(capsys, 2, good + ["--out", "o.json", "--input-size", "0"], "--input-size", "positive")
    one_line_error(capsys, 2, good + ["--out", "o.json", "--generate", "-1", "--generate-out", "g.json"],
                   "--generate", "positive")
    one_line_error(capsys, 2, ["--tf-c", "x.c", "--seed-constants", "--out", "o.json", "--generate", "4",
                               "--generate-out", "g.json"], "--seed-constants")


def test_a_fifo_tf_c_or_data_is_refused(tiny_assets, tmp_path):
    # Both blocked in open() for ever: in a subprocess, so that a hang fails the test.
    os.mkfifo(tmp_path / "fifo.c")
    shutil.copytree(tiny_assets, tmp_path / "assets")
    (tmp_path / "assets" / "data").unlink()
    os.mkfifo(tmp_path / "assets" / "data")
    (tmp_path / "tf.c").write_text("/* not read this far */")
    for tf_c, assets, name in ((tmp_path / "fifo.c", tiny_assets, "fifo.c"), (tmp_path / "tf.c", tmp_path / "assets",
                                                                              "data")):
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "tf_oracle.py"), "--tf-c", str(tf_c),
                               "--assets", str(assets), "--out", str(tmp_path / "o.json")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("tf_oracle.py: error: ") and name in done.stderr and "FIFO" in done.stderr
    assert not (tmp_path / "o.json").exists()
