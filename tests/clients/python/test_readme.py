"""The "From your application" snippets of docs/reference.md are the client tests' own code:
each fenced block of that section must appear, line for line, in a test source (indentation
and blank lines aside), so that the documentation cannot show code that was never run."""

import re
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent.parent
README = CLIENTS.parent.parent / "docs" / "reference.md"
SOURCES = [CLIENTS / "node" / "test.mjs", *sorted((CLIENTS / "python").glob("test_*.py"))]


def normalized(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def section_blocks() -> list[str]:
    readme = README.read_text()
    start = readme.index("### From your application\n")
    end = re.compile(r"^#{1,3} ", re.M).search(readme, start + 1)
    section = readme[start : end.start() if end else len(readme)]
    return re.findall(r"^```[a-z]*\n(.*?)^```$", section, re.S | re.M)


def contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack)))


def test_every_snippet_is_in_a_client_test():
    blocks = section_blocks()
    # node (4), psycopg (4), SQLAlchemy (3), Django (4): a section that lost its blocks, or a
    # parser that stopped finding them, fails here rather than passing on nothing.
    assert len(blocks) == 15, f"{len(blocks)} blocks found"
    sources = {path.name: normalized(path.read_text()) for path in SOURCES}
    for block in blocks:
        lines = normalized(block)
        assert lines, "an empty block"
        found = [name for name, source in sources.items() if contains(source, lines)]
        assert found, "this README snippet is in no client test:\n" + block
