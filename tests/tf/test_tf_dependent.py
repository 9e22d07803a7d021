"""Dependent launches (cudakit.dependent): a recorded pass lets each kernel start before the one
before it has finished, so every kernel tf_numba launches must wait for its inputs before it
touches an array another kernel writes. A kernel that forgot would race only on sm_90 GPUs and
only sometimes, so the rule is checked here in the source, on any machine; on a GPU,
test_tf_branches.py and test_tf_generate.py compare replayed passes with eager ones bit for bit,
and tools/ptx_check.py finds griddepcontrol.wait in every kernel's PTX."""
import ast
from pathlib import Path

import pytest

SOURCES = sorted((Path(__file__).resolve().parents[2] / "tf_numba").glob("*.py"))
# Kernels that copy a weight before they wait: the matrix kernels (matmul.build: B of the kinds with
# b_weight; build_row: B of tf_fc and the unembedding). Before the wait they may read only b, the
# sum's length S, and out's shape (a launch argument, not memory).
PREFETCH = {("matmul.py", "build"), ("matmul.py", "build_row")}
PREFETCH_NAMES = {"b", "S"}


def is_kernel(node):
    """@cuda.jit kernels (not device functions), and the `kernel` functions that builders compile."""
    decorators = [ast.unparse(d) for d in node.decorator_list]
    if any(d.startswith("cuda.jit") for d in decorators):
        return not any("device=True" in d for d in decorators)
    return node.name == "kernel" and not decorators


def kernels():
    """(file, enclosing function or None, kernel FunctionDef) for every kernel in tf_numba."""
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        for outer in ast.walk(tree):
            for node in ast.iter_child_nodes(outer):
                if isinstance(node, ast.FunctionDef) and is_kernel(node):
                    enclosing = outer.name if isinstance(outer, ast.FunctionDef) else None
                    found.append((path.name, enclosing, node))
    return found


def is_wait(stmt):
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value) == "wait_inputs()"


def parameters_read(stmts, params):
    """The kernel's parameters these statements name, out.shape taken as no read of out."""
    names = set()
    for stmt in stmts:
        shapes = {id(n.value) for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and n.attr == "shape"}
        names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in params and id(n) not in shapes}
    return names


KERNELS = kernels()


def test_found_the_kernels():
    names = {node.name for _, _, node in KERNELS}
    assert {"tf_ln", "tf_unembedding_softmax", "tf_embedding_back", "kernel"} <= names
    assert sum(1 for f, outer, _ in KERNELS if (f, outer) in PREFETCH) == 2


@pytest.mark.parametrize("where, node", [(f"{f}:{outer or ''}:{n.name}", n) for f, outer, n in KERNELS],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_every_kernel_waits_for_its_inputs_first(where, node):
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    waits = [i for i, stmt in enumerate(body) if is_wait(stmt)]
    nested = [n for stmt in body for n in ast.walk(stmt) if n is not stmt and isinstance(n, ast.Expr) and is_wait(n)]
    assert len(waits) == 1 and not nested, f"{where}: wait_inputs() once, at the top level of the kernel"
    before = body[:waits[0]]
    file, outer, _ = where.split(":")
    if (file, outer) in PREFETCH:
        params = {a.arg for a in node.args.args}
        assert parameters_read(before, params) <= PREFETCH_NAMES, \
            f"{where}: before wait_inputs() it reads {sorted(parameters_read(before, params) - PREFETCH_NAMES)}"
    else:
        assert not before, f"{where}: wait_inputs() must come first"


def test_the_check_catches_a_read_before_the_wait():
    tree = ast.parse("def kernel(a, b, out, S):\n    n = out.shape[1]\n    x = b[0] + a[0]\n    wait_inputs()\n")
    node = tree.body[0]
    assert parameters_read(node.body[:2], {"a", "b", "out", "S"}) == {"a", "b"}
