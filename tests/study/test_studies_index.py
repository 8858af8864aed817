"""studies/README.md indexes every committed study (what it asks, the command and code that made it, who cites
it, current or superseded): a folder added under studies/ without its row fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"


def folders(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))


def test_every_study_folder_has_its_row_in_studies_readme():
    index = (STUDIES / "README.md").read_text()
    top = [name for name in folders(STUDIES) if name != "history"]
    assert len(top) > 20  # the studies are there: the check is not vacuous
    assert [name for name in top if f"`{name}/`" not in index] == []
    assert [name for name in folders(STUDIES / "history") if f"`history/{name}/`" not in index] == []


def test_every_script_beside_the_studies_is_indexed():
    index = (STUDIES / "README.md").read_text()
    scripts = sorted(str(p.relative_to(STUDIES)) for p in STUDIES.rglob("*.py"))
    assert scripts and [s for s in scripts if f"`{s}`" not in index and f"`{Path(s).name}`" not in index] == []
