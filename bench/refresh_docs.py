"""Put the tables the bench scripts wrote into docs/benchmarks.md, each between its marker comments.

A bench script run with ``--markdown DIR/<name>.md`` writes its table there; this replaces what lies
between ``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->`` in the doc with that file's text and
leaves everything outside the markers (the prose) as it is. ``make bench`` runs it last:

    python bench/refresh_docs.py docs/benchmarks.md outputs/bench
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def write_fragment(path: str | Path, header: list[str], rows: list[list[str]], note: str = "") -> None:
    """Write a markdown table (optionally preceded by a ``note`` paragraph) as a fragment for ``refresh``."""
    lines = [f"{note.strip()}\n"] if note else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


def markers(name: str) -> tuple[str, str]:
    """The opening and closing marker comments of section ``name``."""
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the part between section ``name``'s markers replaced by ``body``.

    Raises:
        ValueError: when the doc does not hold exactly one pair of markers for ``name``.
    """
    start, end = markers(name)
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
    found = len(pattern.findall(text))
    if found != 1:
        raise ValueError(
            f"section {name!r} needs exactly one '{start}' ... '{end}' pair in the doc (found {found}); "
            "add the markers around the place its table belongs"
        )
    return pattern.sub(lambda _: f"{start}\n{body.strip()}\n{end}", text)


def refresh(doc: Path, fragment_dir: Path) -> list[str]:
    """Replace every section that has a ``<name>.md`` fragment in ``fragment_dir``; returns the names."""
    text = doc.read_text()
    names = []
    for fragment in sorted(fragment_dir.glob("*.md")):
        text = replace_section(text, fragment.stem, fragment.read_text())
        names.append(fragment.stem)
    doc.write_text(text)
    return names


def main() -> None:
    """Command line: refresh DOC from the fragments in DIR."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("doc", type=Path, help="the markdown file to update, e.g. docs/benchmarks.md")
    p.add_argument("fragment_dir", type=Path, help="folder of <name>.md tables written by the bench scripts")
    args = p.parse_args()
    names = refresh(args.doc, args.fragment_dir)
    print(f"refreshed {len(names)} section(s) of {args.doc}: {', '.join(names) or 'none'}")


if __name__ == "__main__":
    main()
