"""What the tools' command lines share: a usage error as one line (exit status 2; bad data and
failed runs exit 1), and the checks on path and count options that run before any work.

The tools import this by file name (tools/ is on sys.path for a script there, and for the tests).
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's packages, installed or not
from cudakit.files import special_file  # noqa: E402
from cudakit.options import integer  # noqa: E402


class UsageError(Exception):
    """A bad command line: the tool prints it as one line `TOOL: error: ...` and exits 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises UsageError, one line naming --help, instead of printing its usage and
    exiting; --help still prints and exits 0. Flags are taken only whole (--out is not --o).
    Subparsers are of this class too (python -m tf_numba's parser does the same)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def parsed(parse, argv, name):
    """parse(argv); or, for a bad command line, None after its one line `NAME: error: ...` on
    stderr (the tool then exits 2)."""
    try:
        return parse(argv)
    except UsageError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return None


def path_arg(text):
    """argparse type of a path option, as a Path: an empty one is refused, as Path('') would be
    the current folder."""
    if not text:
        raise argparse.ArgumentTypeError("is empty; give a path")
    return Path(text)


def positive_int(text):
    """argparse type of a count that must be at least 1."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def made(path):
    """path, its missing folders made (unwritable() lets them through): only once there is
    something to write, so that a run failing on its inputs leaves no empty folders behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def not_a_file(path):
    """What path is when it exists but is not a regular file ('a folder', 'a FIFO', 'a character
    device', ...), else None; symlinks are followed. A missing or unreadable path is None: open()
    says why."""
    if os.path.isdir(path):
        return "a folder"
    return special_file(path)


def same_paths(paths):
    """The first two of paths (None skipped) that name one file, after resolving symlinks and '..',
    or None."""
    seen = {}
    for path in paths:
        if path is None:
            continue
        key = Path(path).resolve()
        if key in seen:
            return seen[key], path
        seen[key] = path
    return None


def unwritable(path):
    """Why a file cannot be written at path, checked before the work that makes it, or None: a
    folder, FIFO or device in its place, a regular file above it, a folder it may not write in.
    The folders above it that are missing are fine: the tools make them."""
    path = Path(path)
    kind = not_a_file(path)
    if kind:
        return f"it is {kind}"
    folder = path.parent
    while not folder.exists():  # also False under a regular file
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None
