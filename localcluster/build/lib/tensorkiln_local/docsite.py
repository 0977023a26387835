"""MkDocs hook (mkdocs.yml `hooks:`): the benchmark results in e2e/results, where the benchmark scripts
write them, are published as the site's results/ pages. A hook rather than a docs/results symlink:
a symlink does not survive every way a checkout is copied, and the site would lose its results."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

E2E = Path(__file__).resolve().parents[2] / "e2e"
RESULTS = E2E / "results"


def on_files(files: Files, config) -> Files:
    for path in sorted(RESULTS.rglob("*")):
        if path.is_file():
            files.append(
                File(
                    path.relative_to(E2E).as_posix(),
                    src_dir=str(E2E),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files
