"""The docs site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``: a broken link, a
missing anchor or a page left out of the nav fails the build, and so does an option reference
page (docs/user-guide/options.md) that is not what docs/gen_options.py generates from the one
option table (datasource/option_table.py). The README stays a manual of at most 300 lines whose
links into docs/ exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mkdocs  # noqa: F401  (the test extra installs it; a missing one is an error, not a skip)

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(root / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's banner, not a warning
    )


def copy_site(tmp_path: Path) -> Path:
    """A copy of mkdocs.yml and docs/ beside the packages the hook imports."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "datasource", root / "datasource")
    return root


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "user-guide" / "options" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = copy_site(tmp_path)
    page = root / "docs" / "reliability.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


def test_a_page_missing_from_the_nav_fails_the_build(tmp_path: Path) -> None:
    root = copy_site(tmp_path)
    (root / "docs" / "orphan.md").write_text("# Orphan\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0
    assert "orphan.md" in done.stderr


def test_an_option_page_out_of_date_fails_the_build(tmp_path: Path) -> None:
    root = copy_site(tmp_path)
    page = root / "docs" / "user-guide" / "options.md"
    page.write_text(page.read_text().replace("`subscribePattern`", "`subscribePatterns`"))
    done = build(root, tmp_path / "site")
    assert done.returncode != 0
    assert "python docs/gen_options.py" in done.stderr


def test_the_option_page_is_the_generated_one() -> None:
    from datasource.option_table import markdown

    assert (ROOT / "docs" / "user-guide" / "options.md").read_text() == markdown()


def slug(heading: str) -> str:
    """The anchor of a heading, as MkDocs' toc (and GitHub, for these headings) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_the_readme_is_a_short_manual_whose_links_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for command in ("bash dev.sh demo", "bash dev.sh test"):
        assert command in text
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]*))?\)", text)
    assert links, "the README links into docs/"
    broken = []
    for path, anchor in links:
        page = ROOT / path
        if not page.is_file():
            broken.append(path)
        elif anchor and anchor not in {
            slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
        }:
            broken.append(f"{path}#{anchor}")
    assert broken == []
