"""glibc rand() and microgpt.cu's float draws against tools/glibc_rand_fixture.c's output."""
import shutil
import subprocess

import numpy as np
import pytest

from microgpt_numba.glibc_rand import GlibcRand, powf, rand_normal, rand_uniform
from tests.conftest import FIXTURES, ROOT

FIXTURE = FIXTURES / "microgpt_glibc_rand.txt"


def fixture_rows(kind):
    return [line.split()[1:] for line in FIXTURE.read_text().splitlines() if line.startswith(kind + " ")]


def f32(hex_text):
    return np.float32(float.fromhex(hex_text))


def test_rand_after_srand_42():
    gen = GlibcRand(42)
    assert [gen.rand() for _ in fixture_rows("rand")] == [int(r[0]) for r in fixture_rows("rand")]


def test_rand_after_srand_1_is_glibc_default_stream():
    gen = GlibcRand(1)
    assert [gen.rand() for _ in fixture_rows("seed1")] == [int(r[0]) for r in fixture_rows("seed1")]


def test_rand_uniform_bits():
    gen = GlibcRand(42)
    ours = [rand_uniform(gen) for _ in fixture_rows("uniform")]
    assert [x.view(np.uint32) for x in ours] == [f32(r[0]).view(np.uint32) for r in fixture_rows("uniform")]


def test_rand_normal_bits():
    gen = GlibcRand(42)
    ours = [rand_normal(gen, np.float32(0.08)) for _ in fixture_rows("normal")]
    assert [x.view(np.uint32) for x in ours] == [f32(r[0]).view(np.uint32) for r in fixture_rows("normal")]


def test_powf_is_glibc():
    for b1, b2, step in zip(*zip(*fixture_rows("pow")), range(0, 1250, 250)):
        assert np.float32(powf(np.float32(0.85), np.float32(step + 1))) == f32(b1)
        assert np.float32(powf(np.float32(0.99), np.float32(step + 1))) == f32(b2)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed: the fixture cannot be rebuilt")
def test_fixture_is_what_gcc_prints(tmp_path):
    exe = tmp_path / "glibc_rand_fixture"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "tools" / "glibc_rand_fixture.c"), "-lm"], check=True)
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert printed.splitlines() == FIXTURE.read_text().splitlines()[1:]
