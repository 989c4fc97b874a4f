#!/usr/bin/env python3
"""Sentence lengths of Markdown files: median and 90th percentile, in words.

Prose only: fenced code blocks, headings and table separator rows are left out; each table
cell, list item and paragraph is its own text. Inline code counts as one word per
whitespace-separated token. A sentence ends at '.', '?' or '!' followed by a space and a
capital letter, a backtick or an opening bracket, or at the end of its text.

Usage: scripts/sentence-lengths.py [--no-tables] FILE...

--no-tables leaves table cells out, so that short cells do not lower the median of prose.
"""
import re
import statistics
import sys


def texts(markdown, tables=True):
    """Yield the prose units of a Markdown document."""
    in_fence = False
    para = []
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            if para:
                yield " ".join(para)
                para = []
            continue
        if in_fence:
            continue
        if not stripped or stripped.startswith("#"):
            if para:
                yield " ".join(para)
                para = []
            continue
        if stripped.startswith("|"):
            if para:
                yield " ".join(para)
                para = []
            if re.fullmatch(r"[|:\-\s]+", stripped):
                continue
            if not tables:
                continue
            for cell in stripped.strip("|").split("|"):
                if cell.strip():
                    yield cell.strip()
            continue
        if re.match(r"([-*]|\d+\.)\s", stripped) and para:
            yield " ".join(para)
            para = []
        para.append(stripped)
    if para:
        yield " ".join(para)


SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`(\[*])")


def sentences(text):
    text = re.sub(r"^([-*]|\d+\.)\s+", "", text)
    for sentence in SENTENCE_END.split(text):
        words = sentence.split()
        if words:
            yield len(words)


def percentile(values, fraction):
    ordered = sorted(values)
    index = min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))
    return ordered[index]


def main(paths):
    tables = "--no-tables" not in paths
    paths = [p for p in paths if p != "--no-tables"]
    print(f"{'file':40} {'sentences':>9} {'median':>6} {'p90':>4} {'max':>4}")
    everything = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lengths = [n for text in texts(f.read(), tables) for n in sentences(text)]
        everything += lengths
        if lengths:
            print(f"{path:40} {len(lengths):9} {statistics.median(lengths):6.0f} "
                  f"{percentile(lengths, 0.9):4} {max(lengths):4}")
    if len(paths) > 1 and everything:
        print(f"{'(all)':40} {len(everything):9} {statistics.median(everything):6.0f} "
              f"{percentile(everything, 0.9):4} {max(everything):4}")


if __name__ == "__main__":
    main(sys.argv[1:])
