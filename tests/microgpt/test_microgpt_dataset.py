"""Documents, vocabulary and tokens: microgpt.cu's byte semantics."""
import pytest

from microgpt_numba.constants import BLOCK_SIZE
from microgpt_numba.dataset import (Dataset, InputError, default_docs, load_dataset, read_input, split_docs,
                                    tokenize_doc)
from microgpt_numba.glibc_rand import GlibcRand


def test_split_strips_crlf_and_drops_empty_lines():
    assert split_docs(b"ab\r\n\r\n\ncd\r\r\nef") == [b"ab", b"cd", b"ef"]


def test_inner_carriage_return_is_kept():
    assert split_docs(b"a\rb\n") == [b"a\rb"]


def test_document_ends_at_nul_like_a_c_string():
    assert split_docs(b"ab\0cd\n\0\n") == [b"ab", b""]


def test_vocab_is_sorted_distinct_bytes_and_bos_follows():
    ds = Dataset([b"\xe9t\xc3", b"ba"])
    assert [ds.id_to_char[i] for i in range(ds.bos_id)] == sorted({0xE9, ord("t"), 0xC3, ord("b"), ord("a")})
    assert ds.bos_id == 5 and ds.vocab_size == 6
    assert ds.char_to_id[0xE9] == 4 and ds.char_to_id[ord("a")] == 0 and ds.char_to_id[ord("z")] == -1


def test_tokenize_short_and_non_ascii():
    ds = Dataset([b"ab\xff"])
    assert tokenize_doc(ds, b"b\xffa") == [3, 1, 2, 0, 3]


def test_tokenize_long_line_keeps_first_block_size_bytes():
    doc = bytes(range(ord("a"), ord("a") + 20))
    ds = Dataset([doc])
    tokens = tokenize_doc(ds, doc)
    assert len(tokens) == BLOCK_SIZE + 2
    assert tokens == [ds.bos_id, *range(BLOCK_SIZE), ds.bos_id]


def test_shuffle_is_microgpt_fisher_yates_on_glibc_stream():
    docs = [bytes([ord("a") + i]) for i in range(6)]
    expected = list(docs)
    gen = GlibcRand(42)
    for i in range(5, 0, -1):
        j = gen.rand() % (i + 1)
        expected[i], expected[j] = expected[j], expected[i]
    assert load_dataset(docs, GlibcRand(42)).docs == expected


def test_read_input_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_input(str(tmp_path / "missing.txt"))
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n\r\n\n")
    with pytest.raises(InputError, match="no non-empty line"):
        read_input(str(blank))
    with pytest.raises(InputError, match="could not read"):
        read_input(str(tmp_path))


def test_default_corpus_is_the_names_package_lowercased():
    docs = default_docs()
    assert len(docs) > 5000 and len(set(docs)) == len(docs)
    assert docs[0] == b"mary" and b"james" in docs
    assert all(d.isalpha() and d == d.lower() for d in docs)
