"""Numbers on a command line read as a C program reads them: ASCII digits. Python's int() also
takes '1_0' and other scripts' digits, which atoi reads as other numbers or none."""
import argparse
import re

INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def integer(text):
    """argparse type of an integer option."""
    if not INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
    return int(text)
