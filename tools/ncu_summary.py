"""Where a GPU program's time goes, by kernel: reads the CSV that Nsight Compute writes for
`ncu --metrics gpu__time_duration.sum --csv --print-units base` and prints, per kernel name,
the launches, the total and mean time and the share of all kernel time.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        --log-file prof.csv python3 -m tf_numba --validate ...
    python3 tools/ncu_summary.py prof.csv
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    """The kernel's own name out of Numba's: demangled `pkg::module::kernel[abi..](..)` or
    `kernel[v10,cw..](..)`, or mangled `_ZN3pkg6module6kernel...`."""
    if not name.startswith("_ZN"):
        return re.split(r"[\[(<]", name)[0].split("::")[-1]
    parts, rest = [], name[3:]
    while (m := re.match(r"(\d+)", rest)):
        n = int(m.group(1))
        parts.append(rest[len(m.group(1)):len(m.group(1)) + n])
        rest = rest[len(m.group(1)) + n:]
    return parts[-1] if parts else name


def read(path):
    try:
        with open(path, newline="") as f:
            lines = [line for line in f if line.startswith('"')]  # ncu's own log lines come first
    except OSError as exc:
        raise SystemExit(f"ncu_summary: cannot read {path} ({exc.strerror}); give ncu's --log-file")
    rows = list(csv.DictReader(lines))
    if not rows or "Metric Value" not in rows[0]:
        raise SystemExit(f"ncu_summary: {path} holds no ncu CSV metric rows; run ncu with --csv --log-file")
    return [(short_name(r["Kernel Name"]), float(r["Metric Value"].replace(",", "")))
            for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    args = ap.parse_args(argv)
    per = defaultdict(list)
    for name, ns in read(args.csv):
        per[name].append(ns)
    total = sum(sum(v) for v in per.values())
    print(f"{'kernel':32} {'launches':>8} {'total us':>10} {'mean us':>9} {'share':>6}")
    for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:32} {len(v):8d} {sum(v) / 1e3:10.1f} {sum(v) / len(v) / 1e3:9.2f} {sum(v) / total:6.1%}")
    print(f"{'all kernels':32} {sum(len(v) for v in per.values()):8d} {total / 1e3:10.1f}")


if __name__ == "__main__":
    sys.exit(main())
