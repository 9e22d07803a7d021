"""Draw training-loss curves as a PNG: python tools/plot_losses.py LOG [LOG ...] -o losses.png [--force].

Each LOG is either a CSV written by `python -m microgpt_numba --loss-log FILE` (header
`step,loss[,loss_hex]`; the exact float32 from loss_hex when it is there) or a program's stdout:
microgpt.cu's or ours, `step    1 / 1000 | loss 3.2389` lines separated by \\r or \\n (other lines
are ignored). One curve per log, labelled with its file name; with --smooth N a running mean over
N steps is drawn over the faint raw curve.

matplotlib is an optional extra (pip install 'microgpt-numba[plot]'), imported only to draw.
Exit status: 0 drawn, 2 a usage error, 1 a log without losses, an unreadable log, an existing
output without --force, or no matplotlib; every error is one line on stderr.
"""
import csv
import io
import re
import sys
from pathlib import Path

from tool_cli import OneLineParser, UsageError, integer, made, not_a_file, path_arg, same_paths, unwritable

PROG = "plot_losses"
STEP = re.compile(rb"step\s+(\d+) /\s+(\d+) \| loss (\S+)")


class PlotError(Exception):
    """One line for the user; exit 1."""


def parse_csv(text, name="log"):
    """(steps, losses) from a --loss-log CSV's text."""
    rows = csv.reader(io.StringIO(text))
    try:
        return csv_rows(rows, name)
    except csv.Error as exc:  # a field over csv's 128 KiB limit, a NUL, a stray quote
        raise PlotError(f"{name} line {rows.line_num} is not CSV ({exc}); give a --loss-log CSV") from None


def csv_rows(rows, name):
    header = next(rows, [])
    if header[:2] != ["step", "loss"]:
        raise PlotError(f"{name} is not a loss log: its header is {','.join(header)!r}, not 'step,loss[,loss_hex]'")
    exact = len(header) > 2 and header[2] == "loss_hex"
    steps, losses = [], []
    for row in rows:
        if not row:
            continue
        try:
            steps.append(int(row[0]))
            losses.append(float.fromhex(row[2]) if exact and len(row) > 2 else float(row[1]))
        except (ValueError, IndexError):
            raise PlotError(f"{name} line {rows.line_num} is not 'step,loss,...': {','.join(row)[:80]!r}") from None
    return steps, losses


def parse_stdout(data):
    """(steps, losses) from a run's stdout bytes: every `step N / M | loss L` line, split on \\r or \\n."""
    steps, losses = [], []
    for line in re.split(rb"[\r\n]", data):
        m = STEP.fullmatch(line.strip())
        if m:
            try:
                loss = float(m.group(3))
            except ValueError:
                continue
            steps.append(int(m.group(1)))
            losses.append(loss)
    return steps, losses


def read_log(path):
    """(steps, losses) of one log file, CSV or stdout, by its first bytes."""
    path = Path(path)
    kind = not_a_file(path)
    if kind:  # a FIFO would block the read, /dev/zero never end it
        raise PlotError(f"{str(path)!r} is {kind}, not a log file; give a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PlotError(f"could not read {str(path)!r} ({exc.strerror}); give an existing log file") from None
    if data.startswith(b"step,loss"):
        steps, losses = parse_csv(data.decode("utf-8", "replace"), repr(str(path)))
    else:
        steps, losses = parse_stdout(data)
    if not steps:
        raise PlotError(f"{str(path)!r} holds no losses: neither a --loss-log CSV nor 'step N / M | loss L' lines")
    back = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
    if back is not None:  # two runs in one file would be drawn as one zig-zag curve
        raise PlotError(f"{str(path)!r} goes back from step {steps[back - 1]} to step {steps[back]}: it holds more "
                        "than one run; give each run's log on its own")
    return steps, losses


def running_mean(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("matplotlib is not installed; pip install 'microgpt-numba[plot]' (or pip install matplotlib)") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def literal(text):
    """text as matplotlib draws it as written: a pair of $ would start its math mode (and a
    formula it cannot parse fails the whole picture)."""
    return text.replace("$", r"\$")


def draw(logs, out, force=False, title=None, smooth=1, labels=None):
    """Draws each log's curve into the PNG out. logs: paths; labels: their legend entries (default
    the file names). Refuses an existing out unless force."""
    out = Path(out)
    problem = unwritable(out)
    if problem:  # before the logs are read
        raise PlotError(f"cannot write {str(out)!r}: {problem}; give another -o")
    if any(same_paths([p, out]) for p in logs):  # even with --force: the log would be lost
        raise PlotError(f"{str(out)!r} is one of the logs to draw; give another -o")
    if out.exists() and not force:
        raise PlotError(f"{str(out)!r} exists; pass --force to replace it, or give another -o")
    curves = [read_log(p) for p in logs]
    labels = [literal(label) for label in labels or [Path(p).name for p in logs]]
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    styles = ["-", "--", ":", "-."]
    for i, ((steps, losses), label) in enumerate(zip(curves, labels)):
        style = styles[i % len(styles)]
        if smooth > 1:
            line, = ax.plot(steps, losses, style, linewidth=0.5, alpha=0.3)
            ax.plot(steps, running_mean(losses, smooth), style, color=line.get_color(), linewidth=1.5,
                    label=f"{label} (mean of {smooth})")
        else:
            ax.plot(steps, losses, style, linewidth=1.0, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(literal(title or "training loss"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        with open(made(out), "wb" if force else "xb") as f:
            fig.savefig(f, format="png")
    except FileExistsError:
        raise PlotError(f"{str(out)!r} exists; pass --force to replace it, or give another -o") from None
    except OSError as exc:
        raise PlotError(f"could not write {str(out)!r} ({exc.strerror}); give a writable -o path") from None
    finally:
        plt.close(fig)
    return out


def main(argv=None):
    p = OneLineParser(prog="python tools/plot_losses.py", description=__doc__.splitlines()[0],
                      epilog="Logs: --loss-log CSVs or stdout logs of microgpt.cu or python -m microgpt_numba.")
    p.add_argument("logs", nargs="+", metavar="LOG", type=path_arg, help="loss logs to draw, one curve each")
    p.add_argument("-o", "--out", required=True, metavar="PNG", type=path_arg,
                   help="the picture to write (never replaced without --force)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--title", help="the picture's title (default: training loss)")
    p.add_argument("--smooth", type=integer, default=1, metavar="N",
                   help="draw a running mean over N steps over the raw curve (default: 1, raw only)")
    try:
        try:
            args = p.parse_args(argv)
        except SystemExit as exc:  # --help
            return exc.code or 0
        if args.smooth < 1:
            raise UsageError("--smooth must be at least 1 (see python tools/plot_losses.py --help)")
        print(draw(args.logs, args.out, args.force, args.title, args.smooth))
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except PlotError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
