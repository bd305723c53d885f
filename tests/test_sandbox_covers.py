"""What an isolated candidate sees of the files: the covers the sandbox plans (evaluators/covers.py).

These check the plan itself (no isolation needed): ``$HOME``, the temp folders and the run's
workspace are always covered, whatever the import path, the working directory or the Python
prefix are; only what Python and evoforge need is bound back. tests/test_hostile_corpus.py
checks that the candidates really see so little.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

from evoforge.evaluators.covers import child_covers, layout
from evoforge.evaluators.isolation import IsolationPlan, plan_for, plan_from_json
from evoforge.evaluators.mounts import PACKAGE_DIRS, PACKAGE_ROOT, Cover, needed_paths


def _tree(*paths: Path) -> None:
    for path in paths:
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        else:
            path.mkdir(parents=True, exist_ok=True)


def test_a_venv_used_as_home_exposes_only_what_python_reads_of_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    site = home / "lib" / "python3.11" / "site-packages"
    _tree(site, home / "bin", home / "pyvenv.cfg", home / ".ssh" / "id_rsa.key", home / "notes.txt")
    covers = layout([home, site, home / "bin"], [home], [], prefixes={home})
    assert covers == (Cover(str(home), (str(home / "bin"), str(home / "lib"), str(home / "pyvenv.cfg"))),)


def test_the_working_directory_the_scripts_folder_and_the_checkout_root_are_no_need(tmp_path: Path) -> None:
    home, scripts = tmp_path / "home", tmp_path / "scripts"
    home.mkdir()
    scripts.mkdir()
    needed = needed_paths(str(home), (str(scripts), str(home), str(PACKAGE_ROOT), *sys.path[1:]))
    assert (home in needed, scripts in needed, PACKAGE_ROOT in needed) == (False, False, False)
    assert set(PACKAGE_DIRS) <= set(needed)
    assert Path(os.path.realpath(sys.executable)).parent in needed
    assert Path(site.getsitepackages()[0]).resolve() in needed


def test_home_is_covered_even_when_an_import_path_entry_contains_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tool = home / ".pyenv" / "versions" / "3.11"
    _tree(tool, home / ".ssh")
    covers = layout([tmp_path, tool], [home], [], prefixes=set())
    assert covers == (Cover(str(home), (str(tool),)),)


def test_a_workspace_inside_a_folder_bound_back_gets_a_cover_of_its_own(tmp_path: Path) -> None:
    home, checkout = tmp_path / "home", tmp_path / "home" / "src" / "project"
    workspace = checkout / "evoforge-runs"
    _tree(workspace / "run-a", tmp_path / "elsewhere" / "evoforge-runs")
    hide = [workspace, tmp_path / "elsewhere" / "evoforge-runs"]
    covers = layout([checkout], [home], hide, prefixes=set())
    assert covers == (Cover(str(tmp_path / "elsewhere" / "evoforge-runs"), ()),
                      Cover(str(home), (str(checkout),)),
                      Cover(str(workspace), ()))


def test_a_workspace_out_of_sight_already_needs_no_cover(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _tree(home / "evoforge-runs", home / "tool")
    assert layout([home / "tool"], [home], [home / "evoforge-runs"], prefixes=set()) == (
        Cover(str(home), (str(home / "tool"),)),)


def test_the_childs_own_directory_is_bound_back_writable_and_its_neighbours_hidden(tmp_path: Path) -> None:
    workdir = Path(os.environ.get("TMPDIR", "/tmp")).resolve() / "evoforge-sandbox-x" / "evoforge-eval-1"
    covers = child_covers(workdir)
    assert [c.writable for c in covers if c.writable] == [(str(workdir),)]
    holder = next(c for c in covers if c.writable)
    assert holder.directory in (str(workdir.parent), *map(str, workdir.parents))


def test_a_plan_travels_to_a_fork_server_whole(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    for uid in (57001, None):
        plan = plan_for(workdir, uid, hide=(str(tmp_path),), scratch_mb=77)
        again = plan_from_json(plan.to_json())
        assert again == plan and again.scratch_mb == 77
        assert isinstance(again, IsolationPlan) == (uid is not None)
