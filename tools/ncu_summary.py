"""Where a GPU program's time goes, by kernel: reads the CSV that Nsight Compute writes for
`ncu --metrics gpu__time_duration.sum --csv --print-units base` and prints, per kernel name,
the launches, the total and mean time and the share of all kernel time.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        --log-file prof.csv python3 -m tf_numba --validate ...
    python3 tools/ncu_summary.py prof.csv

Exit status: 0 printed; 1 a CSV that cannot be read or holds no metric rows; 2 a usage error.
"""
import csv
import re
import sys
from collections import defaultdict

from tool_cli import OneLineParser, not_a_file, parsed, path_arg

COLUMNS = ("Kernel Name", "Metric Name", "Metric Value")


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


def csv_lines(path, prog, how):
    """The CSV records of ncu's output in `path` (its own log lines, which come first, left out);
    a file that cannot be one exits with a line that says `how` to make it."""
    kind = not_a_file(path)
    if kind:  # a FIFO would block the read, a device never end it
        raise SystemExit(f"{prog}: error: {path} is {kind}, not a file; {how}")
    try:
        with open(path, newline="") as f:
            return list(csv.reader([line for line in f if line.startswith('"')]))
    except OSError as exc:
        raise SystemExit(f"{prog}: error: cannot read {path} ({exc.strerror}); {how}")
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SystemExit(f"{prog}: error: {path} is not ncu's CSV ({exc}); {how}")


def read(path):
    lines = csv_lines(path, "ncu_summary", "run ncu with --csv --log-file")
    rows = [dict(zip(lines[0], line)) for line in lines[1:]] if lines else []
    if not rows or not all(column in rows[0] for column in COLUMNS):
        raise SystemExit(f"ncu_summary: error: {path} holds no ncu CSV metric rows; run ncu with --csv --log-file")
    times = []
    for r in rows:
        if r.get("Metric Name") == "gpu__time_duration.sum":
            try:
                times.append((short_name(r.get("Kernel Name", "")), float(r.get("Metric Value", "").replace(",", ""))))
            except ValueError:
                raise SystemExit(f"ncu_summary: error: {path}: metric value {r.get('Metric Value', '')!r} is not a "
                                 "number; run ncu with --print-units base") from None
    if not times:  # other metrics only: an empty table that exits 0 would pass for a run without kernels
        raise SystemExit(f"ncu_summary: error: {path} holds no gpu__time_duration.sum rows; run ncu with --metrics "
                         "gpu__time_duration.sum --csv --log-file")
    return times


def main(argv=None):
    ap = OneLineParser(prog="ncu_summary.py", description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=path_arg)
    args = parsed(ap.parse_args, argv, "ncu_summary")
    if args is None:
        return 2
    per = defaultdict(list)
    for name, ns in read(args.csv):
        per[name].append(ns)
    total = sum(sum(v) for v in per.values())
    print(f"{'kernel':32} {'launches':>8} {'total us':>10} {'mean us':>9} {'share':>6}")
    for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:32} {len(v):8d} {sum(v) / 1e3:10.1f} {sum(v) / len(v) / 1e3:9.2f} {sum(v) / (total or 1):6.1%}")
    print(f"{'all kernels':32} {sum(len(v) for v in per.values()):8d} {total / 1e3:10.1f}")


if __name__ == "__main__":
    sys.exit(main())
