"""tf.c as an oracle: build the seed for the assets' sizes, run it, record its 39 sums.

Copies the given tf.c, patches it (file sizes; for other model sizes the dimension #defines
and the literals tied to 12 layers and 64 tokens; every tf_validation_sum printed with %a
instead of aborting on a mismatch; `&printf` for clang < 15), compiles it with clang under a
floating-point profile and writes JSON with every checkpoint's label, element count and sum.

  fma    clang -ffp-contract=on on an FMA target: `a*b + c` in one statement is one fused op
  nofma  clang -ffp-contract=off: every multiply and add rounded on its own

In both, expf/erff/logf are computed in double and rounded to float (correctly rounded
binary32). With --generate N it also builds tf.c with tf_validation 0 and records the greedy
tokens: the prompt is the first min(tokens in data, 64, d_seq - N) tokens, then N steps.
"""
import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tf_assets import ToolError, check_out, sha256, write_files  # noqa: E402
from tool_cli import OneLineParser, not_a_file, parsed, path_arg, positive_int, same_paths  # noqa: E402
from tf_numba.assets import AssetError, config_from_header, load_data, load_enc, read_header  # noqa: E402
from tf_numba.checkpoints import checkpoints  # noqa: E402
from tf_numba.config import GPT2, INPUT_SIZE, Config  # noqa: E402

PROFILES = {"fma": ["-ffp-contract=on"] + (["-mfma"] if platform.machine() in ("x86_64", "AMD64") else []),
            "nofma": ["-ffp-contract=off"]}
# Pre-included ahead of tf.c: correctly rounded binary32 expf/erff/logf through double.
LIBM_DOUBLE = """#include <math.h>
#define expf(x) ((float)exp((double)(x)))
#define erff(x) ((float)erf((double)(x)))
#define logf(x) ((float)log((double)(x)))
"""
SUM_LINE = re.compile(r"^tf_oracle_sum (\d+) (\S+)$", re.M)
TOKEN_LINE = re.compile(r"^tf_oracle_token (\d+)$", re.M)
PROMPT_LINE = re.compile(r"^tf_oracle_prompt (\d+)$", re.M)
# tf_validation_time's total, printed once per pass ("total = 1.5" by clang >= 15, "total : 1.500000" before)
TOTAL_LINE = re.compile(r"double total [:=] ([0-9.eE+-]+)")
SEED_CONSTANT = re.compile(r"tf_validation_sum\([^;]*,\s*(-?0x[0-9a-f.]+p[-+]\d+)\);")


def define(name, value):
    return rf"#define {name} \S+", f"#define {name} {value}", 1


def patches(cfg: Config, input_size: int, files: dict, clang_major: int, generate=None):
    """[(regex, replacement, times it must match)] that turn the seed into this oracle."""
    L = cfg.n_layers
    rules = [
        define("tf_enc_file_size", files["enc"]),
        define("tf_safetensor_file_size", files["model.safetensors"]),
        define("tf_safetensor_json_size", files["json"]),
        define("tf_d_vocab", cfg.d_vocab),
        define("tf_d_seq", cfg.d_seq),
        define("tf_d_model", cfg.d_model),
        define("tf_d_k", cfg.d_k),
        define("tf_n_heads", cfg.n_heads),
        define("tf_n_layers", L),
        # 1/sqrt(d_k) rounded to float, as a hex literal: exact for powers of four.
        define("tf_rsqrt_d_k", float(np.float32(cfg.d_k ** -0.5)).hex() + "f"),
        define("tf_validation", 0 if generate else 1),
        (r"\} h\[12\];", f"}} h[{L}];", 3),
        (r"h\[11\]", f"h[{L - 1}]", 2),
        (r"layer_i == 11\)", f"layer_i == {L - 1})", 10),
        (r"h < 12;", f"h < {L};", 1),
        (r"size_t input_size = 64;", f"size_t input_size = {input_size};", 1),
        # Print every sum (count and %a) and go on instead of aborting on a mismatch.
        (r"( *)if \(expected_sum != sum\) \{",
         r'\1fprintf(stderr, "tf_oracle_sum %zu %a\\n", in_count, sum);\n\g<0>', 1),
        (r"abort\(\);", "", 1),
    ]
    if clang_major < 15:
        rules.append((r"__builtin_dump_struct\(&time, printf\)", "__builtin_dump_struct(&time, &printf)", 2))
    if generate:
        rules += [
            (r"(size_t input_size = data_token_count < 64 \? data_token_count : 64;)",
             rf'\1\n        if (input_size > tf_d_seq - {generate}) input_size = tf_d_seq - {generate};'
             r'\n        fprintf(stderr, "tf_oracle_prompt %zu\\n", input_size);', 1),
            (r"i < 128;", f"i < {generate};", 1),
            (r"(input\[input_size\+\+\] = out_token;)",
             r'\1\n            fprintf(stderr, "tf_oracle_token %u\\n", (unsigned)out_token);', 1),
        ]
    return rules


def patch(source: str, rules) -> str:
    for pattern, replacement, times in rules:
        source, n = re.subn(pattern, replacement, source)
        if n != times:
            raise ToolError(f"tf.c does not look like the seed: /{pattern}/ matched {n} times, expected {times}; "
                            "pass the seed tf.c to --tf-c")
    return source


def clang_version():
    try:
        out = subprocess.run(["clang", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise ToolError("clang is not installed; install it from the system's package manager "
                        "(e.g. apt-get install clang)") from None
    first = out.splitlines()[0]
    major = int(re.search(r"clang version (\d+)", first).group(1))
    return first, major


def build_and_run(source: str, fp_model: str, assets: Path, work: Path):
    """Compile the patched source in work/ and run it there with work/assets -> assets."""
    (work / "tf.c").write_text(source)
    (work / "libm_double.h").write_text(LIBM_DOUBLE)
    cmd = ["clang", "-O2", *PROFILES[fp_model], "-include", "stdint.h", "-include", "libm_double.h",
           "-o", "tf", "tf.c", "-lm"]
    built = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if built.returncode:
        errors = [line for line in built.stderr.splitlines() if "error" in line] or [built.stderr.strip()]
        raise ToolError(f"clang failed to build the patched tf.c: {errors[0]}")
    (work / "assets").symlink_to(assets.resolve(), target_is_directory=True)
    ran = subprocess.run(["./tf"], cwd=work, capture_output=True)
    stderr = ran.stderr.decode(errors="replace")
    if ran.returncode:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolError(f"tf.c stopped with status {ran.returncode}: {last}; check the assets")
    return stderr, ran.stdout.decode(errors="replace")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def asset_record(assets: Path, header: dict):
    """How the assets were made (the synth command in the file's metadata) and their digests."""
    made_by = header.get("__metadata__", {}).get("made_by", "not recorded in model.safetensors")
    return {"made_by": made_by, **{f"sha256({name})": sha256(assets / name) for name in ("model.safetensors", "enc", "data")}}


def run_oracle(tf_c, assets, fp_model, input_size=INPUT_SIZE, generate=None):
    """Build and run tf.c on the assets: (checkpoint record, generation record or None)."""
    assets = Path(assets)
    source = read_tf_c(tf_c)
    # tf_numba's reader, with its checks: tf.c itself asserts or reads garbage on a bad file.
    header, json_raw = read_header(assets / "model.safetensors")
    cfg = config_from_header(header, assets / "model.safetensors")
    load_enc(assets / "enc", cfg.d_vocab)
    data = load_data(assets / "data", cfg.d_vocab)
    if not 1 <= input_size <= cfg.d_seq or len(data) < input_size + 1:
        raise ToolError(f"--input-size {input_size} needs 1..{cfg.d_seq} inputs and {input_size + 1} data tokens "
                        f"(data has {len(data)}); lower --input-size")
    if generate is not None and not 1 <= generate < cfg.d_seq:
        raise ToolError(f"--generate {generate} must be 1..{cfg.d_seq - 1} so the prompt fits d_seq")
    compiler, major = clang_version()
    files = {"enc": (assets / "enc").stat().st_size, "json": len(json_raw),
             "model.safetensors": (assets / "model.safetensors").stat().st_size}
    config = {**cfg.__dict__, "input_size": input_size}
    common = {"config": config, "fp_model": fp_model, "compiler": compiler, "assets": asset_record(assets, header)}

    with tempfile.TemporaryDirectory(prefix="tf_oracle.") as work:
        stderr, stdout = build_and_run(patch(source, patches(cfg, input_size, files, major)), fp_model, assets,
                                       Path(work))
    sums = SUM_LINE.findall(stderr)
    totals = [float(t) for t in TOTAL_LINE.findall(stdout)]
    expected = checkpoints(cfg, input_size)
    if [int(count) for count, _ in sums] != [count for _, count in expected]:
        raise ToolError(f"tf.c printed {len(sums)} sums whose counts differ from tf_numba.checkpoints; "
                        "the patched tf.c and the labels disagree")
    record = {**common, "checkpoints": [{"label": label, "count": count, "sum": value}
                                        for (label, count), (_, value) in zip(expected, sums)]}
    if len(totals) == 2:  # what tools/bench.py compares the port's times with
        record["tf_c_seconds"] = {
            "forward": totals[0], "backward": totals[1], "cpu": cpu_name(), "cores": os.cpu_count(),
            "how": "tf.c's own timers (tf_validation_time totals, one pass each; they include its checkpoint sums)"}
    if generate is None:
        return record, None

    with tempfile.TemporaryDirectory(prefix="tf_oracle.") as work:
        stderr, _ = build_and_run(patch(source, patches(cfg, input_size, files, major, generate)),
                                  fp_model, assets, Path(work))
    prompt_size = int(PROMPT_LINE.search(stderr).group(1))
    tokens = [int(t) for t in TOKEN_LINE.findall(stderr)]
    generation = {**common, "generate": generate, "prompt": data[:prompt_size].tolist(), "tokens": tokens}
    return record, generation


def read_tf_c(tf_c) -> str:
    kind = not_a_file(tf_c)
    if kind:  # a FIFO would block the read, a device never end it
        raise ToolError(f"--tf-c {tf_c} is {kind}, not a file; pass the seed tf.c to --tf-c")
    try:
        return Path(tf_c).read_text()
    except OSError as exc:
        raise ToolError(f"cannot read {tf_c} ({exc.strerror or exc}); pass the seed tf.c to --tf-c") from None
    except UnicodeDecodeError:
        raise ToolError(f"{tf_c} is not UTF-8 text; pass the seed tf.c to --tf-c") from None


def seed_constants(tf_c) -> list:
    """tf.c's own expected sums (for the real GPT-2 weights), as written in the seed, in order."""
    return SEED_CONSTANT.findall(read_tf_c(tf_c))


def seed_constants_record(tf_c, command):
    values = seed_constants(tf_c)
    expected = checkpoints(GPT2, INPUT_SIZE)
    if len(values) != len(expected):
        raise ToolError(f"found {len(values)} tf_validation_sum constants in {tf_c}, expected {len(expected)}; "
                        "pass the seed tf.c")
    return {"config": {**GPT2.__dict__, "input_size": INPUT_SIZE}, "fp_model": "fma",
            "compiler": "unknown (tf.c's author; most likely Apple clang on arm64, see docs/tf.md)",
            "command": command, "source": "the seed tf.c, the tf_validation_sum constants in order",
            "assets": "real GPT-2 124M weights (not available here)",
            "checkpoints": [{"label": label, "count": count, "sum": value}
                            for (label, count), value in zip(expected, values)]}


def write_json(path, record, force):
    path = Path(path)
    text = json.dumps(record, indent=1) + "\n"
    write_files(path.parent, {path.name: lambda: [text.encode()]}, force)


def parse_args(argv):
    parser = OneLineParser(prog="tf_oracle.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tf-c", required=True, type=path_arg, help="the seed tf.c (read, never modified)")
    parser.add_argument("--assets", type=path_arg, help="folder with model.safetensors, enc, data (tools/tf_assets.py)")
    parser.add_argument("--fp-model", choices=sorted(PROFILES), default="fma", help="floating-point profile")
    parser.add_argument("--input-size", type=positive_int, default=INPUT_SIZE,
                        help="tokens in the training step (tf.c: %(default)s; the tiny fixtures use 8)")
    parser.add_argument("--generate", type=positive_int, metavar="N", help="also record N greedy tokens")
    parser.add_argument("--generate-out", type=path_arg, help="JSON file for the generated tokens (with --generate)")
    parser.add_argument("--seed-constants", action="store_true",
                        help="write tf.c's own 39 expected sums (real GPT-2 weights) instead of running it")
    parser.add_argument("--out", required=True, type=path_arg, help="JSON file for the checkpoints")
    parser.add_argument("--force", action="store_true", help="replace existing output files")
    args = parser.parse_args(argv)
    if (args.generate is None) != (args.generate_out is None):
        parser.error("--generate N and --generate-out FILE go together")
    if not args.seed_constants and args.assets is None:
        parser.error("--assets DIR is required (unless --seed-constants)")
    if args.seed_constants and args.generate is not None:
        parser.error("--generate means nothing with --seed-constants, which runs nothing: drop one")
    same = same_paths([args.out, args.generate_out])
    if same:  # the second write would replace the first, or fail after the whole run
        parser.error(f"--out {same[0]} and --generate-out {same[1]} are the same file: give two files")
    return args


def main(argv=None):
    args = parsed(parse_args, argv, "tf_oracle.py")
    if args is None:
        return 2
    command = shlex.join(["python", "tools/tf_oracle.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        inputs = [("--tf-c", args.tf_c)] + [(f"assets' {name}", args.assets / name) for name in
                                             ("model.safetensors", "enc", "data") if args.assets is not None]
        for option, path in (("--out", args.out), ("--generate-out", args.generate_out)):
            if path is None:
                continue
            for name, given in inputs:  # --force wrote the JSON over the seed tf.c it had read
                if same_paths([given, path]):
                    raise ToolError(f"{option} {path} is the {name} this reads: pick another {option}")
            check_out(path.parent, [path.name], args.force, option=option)  # before minutes of clang and tf.c
        if args.seed_constants:
            write_json(args.out, seed_constants_record(args.tf_c, command), args.force)
            return 0
        record, generation = run_oracle(args.tf_c, args.assets, args.fp_model, args.input_size, args.generate)
        write_json(args.out, {"command": command, **record}, args.force)
        if generation is not None:
            write_json(args.generate_out, {"command": command, **generation}, args.force)
    except (ToolError, AssetError) as exc:
        print(f"tf_oracle.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
