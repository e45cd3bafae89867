"""No function in rlcli longer than MAX_LINES, measured from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80


class FunctionSpan(NamedTuple):
    path: Path
    line: int  # of the `def`
    name: str  # qualified: Class.method, outer.inner
    length: int  # lines


def function_spans(source: str, path: Path) -> list[FunctionSpan]:
    """Every function and method in ``source``, nested ones included (and also inside their parent's span).

    A span runs from the ``def`` line to the last line of the body, blank lines and comments inside it
    included; decorators are left out because they configure the function rather than add to what a
    reader must follow.
    """
    spans = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                spans.append(FunctionSpan(path, child.lineno, name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source, filename=str(path)), "")
    return spans


def test_no_function_is_longer_than_the_limit():
    spans = [span for path in sorted((ROOT / "rlcli").rglob("*.py"))
             for span in function_spans(path.read_text(), path)]
    too_long = sorted((s for s in spans if s.length > MAX_LINES), key=lambda s: (-s.length, s.path, s.line))
    assert not too_long, f"{len(too_long)} functions longer than {MAX_LINES} lines:\n" + "\n".join(
        f"    {s.path.relative_to(ROOT)}:{s.line}  {s.name}  {s.length} lines" for s in too_long)


def test_spans_count_from_def_to_the_end_of_the_body_and_include_nested_functions():
    source = (
        "import functools\n"             # 1
        "@functools.cache\n"             # 2  decorator: not counted
        "@staticmethod\n"                # 3
        "def outer(\n"                   # 4
        "    x,\n"                       # 5
        "):\n"                           # 6
        "    def inner():\n"             # 7
        "        return x\n"             # 8
        "\n"                             # 9
        "    # a comment\n"              # 10
        "    return inner\n"             # 11
        "class Agent:\n"                 # 12
        "    async def act(self):\n"     # 13
        "        pass\n"                 # 14
        "if True:\n"                     # 15
        "    def conditional(): pass\n"  # 16
    )
    spans = {(s.name, s.line, s.length) for s in function_spans(source, Path("m.py"))}
    assert spans == {("outer", 4, 8), ("outer.inner", 7, 2), ("Agent.act", 13, 2), ("conditional", 16, 1)}
