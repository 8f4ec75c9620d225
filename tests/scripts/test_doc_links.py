#!/usr/bin/env python3
"""tests/scripts/test_doc_links.py — every relative link in README.md, the folder READMEs and
docs/ names a file or folder of the repository (a moved file breaks no reader's path), and no
page points to a DESIGN.md outside the repository (docs/design.md is the project's own)."""
import pathlib
import re
import subprocess
import sys

repo = pathlib.Path(__file__).resolve().parents[2]
listed = subprocess.run(["git", "ls-files", "README.md", "*/README.md", "docs/*.md"], cwd=repo,
                        capture_output=True, text=True)
pages = [repo / p for p in listed.stdout.split()] if listed.returncode == 0 and listed.stdout.strip() else \
    [repo / "README.md", *repo.glob("*/README.md"), *repo.glob("docs/*.md")]
fails = []
for page in pages:
    text = page.read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    prose = re.sub(r"`[^`\n]*`", "", prose)              # nor do code spans
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^(https?:|mailto:|#)", target):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            fails.append(f"BROKEN: {page.relative_to(repo)} links to {target}")
    if "DESIGN.md" in text:
        fails.append(f"OUTSIDE: {page.relative_to(repo)} refers to DESIGN.md, not in the repository (docs/design.md is)")
for line in fails:
    print(line)
if fails:
    sys.exit(f"{len(fails)} broken reference(s)")
print(f"ok: every relative link of {len(pages)} pages resolves")
