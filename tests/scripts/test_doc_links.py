#!/usr/bin/env python3
"""tests/scripts/test_doc_links.py — every relative link in README.md, the folder READMEs and
docs/ names a file or folder of the repository (a moved file breaks no reader's path), and no
tracked file (pages, code comments, scripts) points to a DESIGN.md outside the repository
(docs/design.md is the project's own)."""
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
tracked = subprocess.run(["git", "grep", "-l", "-I", "DESIGN\\.md", "--", ".", ":!tests/scripts/test_doc_links.py"],
                         cwd=repo, capture_output=True, text=True)
found = tracked.stdout.split()  # git grep exits 1 when nothing matches: no output
if tracked.returncode > 1:  # not a git checkout: every source and page file
    found = [str(f.relative_to(repo)) for pattern in ("*.md", "*.h", "*.cpp", "*.cu", "*.sh", "*.py", "CMakeLists.txt")
             for f in repo.rglob(pattern) if not re.match(r"(build|\.venv|\.deps|\.git)", str(f.relative_to(repo)))
             and f.name != "test_doc_links.py" and "DESIGN.md" in f.read_text(errors="replace")]
for path in found:
    fails.append(f"OUTSIDE: {path} refers to DESIGN.md, not in the repository (docs/design.md is)")
for line in fails:
    print(line)
if fails:
    sys.exit(f"{len(fails)} broken reference(s)")
print(f"ok: every relative link of {len(pages)} pages resolves")
