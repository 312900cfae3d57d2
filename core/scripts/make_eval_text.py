"""Rebuild ``icml/data/jargon-4.4.7.txt.gz``, the offline evaluation text, from Debian's
``dict-jargon`` package (The Jargon File 4.4.7, public domain).

    apt-get download dict-jargon && dpkg-deb -x dict-jargon_*.deb x
    python core/scripts/make_eval_text.py x/usr/share/dictd/jargon.dict.dz

Each lexicon entry becomes ``headword: definition``, one paragraph a line, unwrapped. The
database header, ASCII art, tables and code (indented deeper than the body text, or mostly
non-letters) are dropped; ``{cross reference}`` braces are removed, keeping the words.
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "icml" / "data" / "jargon-4.4.7.txt.gz"
BODY_INDENT = 4


def _is_prose(lines: list[str]) -> bool:
    if any(len(line) - len(line.lstrip()) > BODY_INDENT for line in lines):
        return False
    text = " ".join(line.strip() for line in lines)
    visible = [c for c in text if not c.isspace()]
    return len(text.split()) >= 8 and sum(c.isalpha() for c in visible) >= 0.75 * len(visible)


def entries(raw: str) -> list[str]:
    """``headword: paragraph`` lines from the dictd text of the Jargon File."""
    out: list[str] = []
    headword = ""
    para: list[str] = []

    def flush() -> None:
        if headword and not headword.startswith("00-database") and para and _is_prose(para):
            text = re.sub(r"[{}]", "", " ".join(line.strip() for line in para))
            out.append(f"{headword}: {text}")
        para.clear()

    for line in raw.splitlines():
        if not line.strip():
            flush()
        elif not line[0].isspace():
            flush()
            headword = line.strip()
        elif line.startswith(" " * BODY_INDENT):
            para.append(line)
        else:  # the pronunciation line under a headword
            flush()
    flush()
    return out


def main(src: str) -> None:
    raw = gzip.open(src, "rt", encoding="utf-8").read()
    text = "\n".join(entries(raw)) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(OUT, "wb", mtime=0) as fh:  # mtime 0: the same bytes on every rebuild
        fh.write(text.encode("utf-8"))
    print(f"{OUT}: {len(text.split())} words, {len(text)} characters")


if __name__ == "__main__":
    main(sys.argv[1])
