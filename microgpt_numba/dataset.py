"""Documents, vocabulary and tokens, with microgpt.cu's byte semantics.

A document is one line of the input with its trailing '\\n'/'\\r' bytes removed; empty lines
are dropped. The C keeps lines as C strings, so a document ends at its first NUL byte.
The vocabulary is the set of bytes seen, in ascending order; BOS is the id after them.
"""
import os
from importlib import resources

import numpy as np

from cudakit.files import special_file

from .constants import BLOCK_SIZE

DEFAULT_CORPUS = "names package (US census first names, lowercased, each name once)"


class InputError(Exception):
    """Bad user input: the CLI prints the message on one line and exits non-zero."""


class Dataset:
    def __init__(self, docs):
        self.docs = docs
        self.char_to_id = np.full(256, -1, dtype=np.int32)
        self.id_to_char = np.zeros(256, dtype=np.uint8)
        seen = set()
        for doc in docs:
            seen.update(doc)
        for vocab, c in enumerate(sorted(seen)):
            self.char_to_id[c] = vocab
            self.id_to_char[vocab] = c
        self.bos_id = len(seen)
        self.vocab_size = len(seen) + 1


def split_docs(data):
    """The documents of a file's bytes, in file order (before the shuffle)."""
    docs = []
    for line in data.split(b"\n"):
        line = line.rstrip(b"\r\n")
        if line:
            docs.append(line.split(b"\0", 1)[0])
    return docs


def shown_path(path):
    """A path for a one-line message, quoted: its bytes (os.fsencode: a name need not be UTF-8) as UTF-8,
    undecodable bytes as \\xNN and unprintable characters escaped."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return "'" + "".join(c if c.isprintable() else repr(c)[1:-1] for c in text) + "'"


def read_input(path):
    shown = shown_path(path)
    kind = special_file(path)
    if kind:
        raise InputError(f"input file {shown} is {kind}, not a file; give --input a regular text file, one "
                         "document per line")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InputError(f"input file {shown} does not exist; "
                         "give --input an existing text file, one document per line")
    except OSError as exc:
        raise InputError(f"could not read input file {shown} ({exc.strerror}); give --input a readable text file")
    docs = split_docs(data)
    if not docs:
        raise InputError(f"input file {shown} has no non-empty line; give --input a file with one document per line")
    if not any(docs):  # microgpt.cu would train on BOS alone: a vocabulary of nothing, every loss 0
        raise InputError(f"input file {shown} has no byte before a NUL on any line (documents end at a NUL, as C "
                         "strings do); give --input a file whose lines have text before any NUL byte")
    return docs


def default_docs():
    """US-census first names shipped by the `names` package, lowercased.

    The female list, then the male one; a name on both lists is kept once, where it first appears.
    """
    docs = {}
    for table in ("dist.female.first", "dist.male.first"):
        try:
            text = resources.files("names").joinpath(table).read_text(encoding="ascii")
        except (ImportError, OSError) as exc:
            raise InputError(f"the default corpus, the names package, is not there ({exc}); "
                             "pip install names, or give --input a text file with one document per line")
        docs.update((line.split()[0].lower().encode("ascii"), None) for line in text.splitlines() if line.strip())
    return list(docs)


def shuffle_docs(docs, gen):
    for i in range(len(docs) - 1, 0, -1):
        j = gen.rand() % (i + 1)
        docs[i], docs[j] = docs[j], docs[i]


def load_dataset(docs, gen):
    """Shuffle the documents with the program's glibc stream, then build the vocabulary."""
    docs = list(docs)
    shuffle_docs(docs, gen)
    return Dataset(docs)


def tokenize_doc(dataset, doc):
    """BOS, at most BLOCK_SIZE bytes of the document, BOS."""
    ids = dataset.char_to_id[np.frombuffer(doc[:BLOCK_SIZE], dtype=np.uint8)]
    return [dataset.bos_id, *ids.tolist(), dataset.bos_id]


def trained_positions(token_count):
    """main's n for a document of token_count tokens: the positions forward_sequence trains."""
    return min(token_count - 1, BLOCK_SIZE)
