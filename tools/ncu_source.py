"""Where one kernel's warps spend their time, by stretch of its SASS: reads the source page that
Nsight Compute writes for one launch and prints, for each stretch of code between barriers (a
`BAR` or an `EXIT` ends one), its share of the warp-state samples and of the instructions
executed, then the instructions with the most samples.

    ncu --clock-control none --kernel-name regex:'tf_attn\\b' --launch-skip 13 --launch-count 1 \\
        --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \\
        python3 ... > src.csv
    python3 tools/ncu_source.py src.csv [--top N]

Exit status: 0 printed; 1 a CSV that cannot be read or holds no SASS rows; 2 a usage error.
"""
import argparse
import sys

from ncu_summary import csv_lines
from tool_cli import OneLineParser, integer, parsed, path_arg

HOW = "run ncu with --section SourceCounters --page source --csv --print-source sass for one launch"
COLUMNS = ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")


def count(text):
    return int(text.replace(",", "") or 0)


def read(path):
    """[(address, SASS, samples, instructions executed)] of the launch's code, in address order."""
    lines = csv_lines(path, "ncu_source", HOW)
    at = next((i for i, line in enumerate(lines) if all(c in line for c in COLUMNS)), None)
    if at is None:
        raise SystemExit(f"ncu_source: error: {path} holds no SASS rows; {HOW}")
    column = [lines[at].index(c) for c in COLUMNS]
    rows = []
    for line in lines[at + 1:]:
        if len(line) < len(lines[at]):
            continue
        address, sass, samples, executed = (line[i] for i in column)
        try:
            rows.append((address, sass.strip(), count(samples), count(executed)))
        except ValueError:
            raise SystemExit(f"ncu_source: error: {path}: {address}: counts {samples!r}, {executed!r} are not numbers; "
                             f"{HOW}") from None
    if not rows:
        raise SystemExit(f"ncu_source: error: {path} holds no SASS rows; {HOW}")
    return rows


def opcode(sass):
    words = sass.split()
    return words[1] if len(words) > 1 and words[0].startswith("@") else (words[0] if words else "")


def stretches(rows):
    """[(first address, last address, samples, executed, instructions, the SASS that ends it)]."""
    out, start = [], 0
    for i, (_, sass, _, _) in enumerate(rows):
        op = opcode(sass)
        if op.startswith("BAR.") or op == "EXIT" or i == len(rows) - 1:
            part = rows[start:i + 1]
            out.append((part[0][0], part[-1][0], sum(r[2] for r in part), sum(r[3] for r in part), len(part), sass))
            start = i + 1
    return out


def top_count(text):
    """argparse type of --top: 0 or more (a negative count listed nothing and exited 0)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def main(argv=None):
    ap = OneLineParser(prog="ncu_source.py", description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=path_arg)
    ap.add_argument("--top", type=top_count, default=20, help="instructions with the most samples to list")
    args = parsed(ap.parse_args, argv, "ncu_source")
    if args is None:
        return 2
    rows = read(args.csv)
    samples, executed = sum(r[2] for r in rows) or 1, sum(r[3] for r in rows) or 1
    print(f"{len(rows)} SASS instructions, {sum(r[2] for r in rows)} samples, {sum(r[3] for r in rows)} executed")
    print(f"{'stretch':>29} {'samples':>8} {'executed':>9} {'SASS':>5}  ends with")
    for first, last, s, e, n, end in stretches(rows):
        print(f"{first:>14}-{last:<14} {s / samples:8.1%} {e / executed:9.1%} {n:5d}  {end}")
    print("most sampled:")
    for address, sass, s, e in sorted(rows, key=lambda r: -r[2])[:args.top]:
        print(f"{address:>14} {s / samples:6.1%} executed {e:>9}  {sass}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
