"""Numbers on a command line read as a C program reads them: ASCII digits. Python's int() and
float() also take '1_0' and other scripts' digits, which atoi and atof read as other numbers or
none."""
import argparse
import math
import re

INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)  # \s: the C locale's isspace


def integer(text):
    """argparse type of an integer option."""
    if not INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
    return int(text)


# what atof reads as a whole number: decimal, hexadecimal (0x1.8p0), inf or nan
C_FLOAT = re.compile(r"\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                     r"([pP][+-]?\d+)?|inf(inity)?|nan)\s*", re.IGNORECASE | re.ASCII)


def c_float(text):
    """text as a double, in the forms atof reads whole (ValueError for any other): a hexadecimal
    number past double's range is an infinity, as atof's."""
    if not C_FLOAT.fullmatch(text):
        raise ValueError(f"not a C number: {text!r}")
    if "x" not in text.lower():
        return float(text)
    try:
        return float.fromhex(text)
    except OverflowError:
        return -math.inf if text.strip().startswith("-") else math.inf


def number(text):
    """argparse type of a float option."""
    try:
        return c_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
