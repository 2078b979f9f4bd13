#!/usr/bin/env python3
"""Checks that every relative link in README.md, CONTRIBUTING.md and docs/*.md resolves: the file
or folder exists, and a #fragment names a heading of the target markdown file (GitHub's anchors:
lower case, punctuation but '-' and '_' dropped, spaces to '-'). External links (http:, https:,
mailto:) are not checked. Prints one line per broken link and exits 1 if there is any.
Usage: scripts/check-doc-links.py [ROOT]   (default: this checkout)"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
FENCE = re.compile(r'^\s*```')


def prose(path):
    """The lines of a markdown file outside fenced code blocks, with their numbers."""
    inside = False
    for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, line


def slug(heading):
    text = heading.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)  # GitHub keeps letters, digits, '_', '-' and spaces
    return text.replace(' ', '-')


def anchors(path):
    found, seen = set(), {}
    for _, line in prose(path):
        m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f'{base}-{n}')
            seen[base] = n + 1
    return found


files = [root / 'README.md', root / 'CONTRIBUTING.md'] + sorted((root / 'docs').glob('*.md'))
broken = 0
for md in files:
    if not md.exists():
        continue
    for number, line in prose(md):
        for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
            if re.match(r'^[a-z]+:', target):
                continue
            path_part, _, fragment = target.partition('#')
            dest = (md.parent / path_part).resolve() if path_part else md
            where = f'{md.relative_to(root)}:{number}: {target}'
            if not dest.exists():
                print(f'broken link {where} (no such file)')
                broken += 1
            elif fragment and dest.suffix == '.md' and fragment not in anchors(dest):
                print(f'broken link {where} (no heading #{fragment} in {dest.relative_to(root)})')
                broken += 1
print(f'doc links: {broken} broken' if broken else 'doc links: all resolve')
sys.exit(1 if broken else 0)
