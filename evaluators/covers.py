"""What a sandboxed child sees of the files: covers over every place it must not look into.

Both isolation kinds (isolation.py as root, userns.py otherwise) hide the same places, *cover
first, then bind back only what an evaluation needs*:

- the user's writable and private places, ``$HOME``, ``/tmp``, ``/var/tmp`` and
  ``/run/user/<uid>`` (``hidden_dirs``), and the places the run names (``hide``: its workspace and
  run folder, so every run's nodes, programs, ``nodes.duckdb``, ``mlflow.db`` and ``cognition/``)
  are always covered by an empty tmpfs;
- onto it only what the child's Python needs is bound back, read-only (mounts.needed_paths: the
  interpreter, its import path, evoforge's own package folders, and ``sandbox.expose``); a needed
  path that equals or contains a covered place is never bound whole: the working directory as an
  import path entry is no need at all, and of a Python prefix (a venv used as ``$HOME``) only its
  ``lib/``, ``lib64/``, ``bin/`` and ``pyvenv.cfg`` are bound;
- a place the run names that shows through a path bound back (a workspace inside an exposed
  folder) gets a cover of its own on top;
- as root (``closed``), a folder the child's uid may not enter on the way to a needed path (e.g.
  ``/opt/tools``, 0700) is covered too, exposing only that path;
- the child's own directory is bound back writable, and the other evaluations' directories
  beside it stay out of sight.

Example::

    covers = child_covers(Path("/tmp/evoforge-sandbox-1000/evoforge-eval-x"), expose=(),
                          hide=("/srv/project/evoforge-runs",), closed=False)
"""

from __future__ import annotations

import os
import pwd
import sys
import tempfile
from functools import cache
from pathlib import Path

from evoforge.evaluators.mounts import Cover, needed_paths, outermost, python_prefixes

_PREFIX_PARTS = ("lib", "lib64", "bin", "pyvenv.cfg")  # what Python reads of its prefix


@cache
def hidden_dirs() -> tuple[Path, ...]:
    """The user's writable and private places a candidate does not need, as they resolve here."""
    uid = os.getuid()
    found = {Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path(f"/run/user/{uid}")}
    found.update(Path(home) for home in (os.environ.get("HOME", ""), _passwd_home(uid)) if home)
    dirs = {p.resolve() for p in found if p.is_dir()}
    return tuple(outermost(sorted(d for d in dirs if d != Path("/"))))


def _passwd_home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:  # a uid without a passwd entry (a container's): $HOME is all there is
        return ""


def child_covers(workdir: Path, expose: tuple[str, ...] = (), hide: tuple[str, ...] = (),
                 closed: bool = False) -> tuple[Cover, ...]:
    """The covers of a child in ``workdir``, in the order they are applied (see the module doc);
    ``closed``: its uid is not evoforge's (root-uid), so unenterable folders are covered too."""
    places = (tuple(map(str, _existing(expose))), tuple(map(str, _existing(hide))))  # as they are now
    covers = list(_covers(*places, closed, os.getcwd(), tuple(sys.path)))
    inside = [c for c in covers if _within(workdir, Path(c.directory))]
    if inside:  # the innermost (applied last) binds the child's own directory back, writable
        own = max(inside, key=lambda c: len(c.directory))
        covers[covers.index(own)] = Cover(own.directory, own.expose, (str(workdir),))
    else:  # the other evaluations' directories
        covers.append(Cover(str(workdir.parent), (), (str(workdir),)))
    return tuple(covers)


@cache
def _covers(expose: tuple[str, ...], hide: tuple[str, ...], closed: bool, cwd: str,
            sys_path: tuple[str, ...]) -> tuple[Cover, ...]:
    """The covers that do not depend on the child's directory (found once per setting: a hot path)."""
    needed = needed_paths(cwd, sys_path) + [Path(p) for p in expose]
    return layout(needed, list(hidden_dirs()), [Path(p) for p in hide], python_prefixes(), closed)


def layout(needed: list[Path], hidden: list[Path], hide: list[Path], prefixes: set[Path],
           closed: bool = False) -> tuple[Cover, ...]:
    """The covers over ``hidden`` and ``hide`` that bind back only ``needed`` (``prefixes``: the
    Python prefixes among them), in the order they are applied (see the module doc)."""
    hiding = [p for p in hide if p != Path("/")]
    places = outermost(sorted({*hidden, *hiding}))
    bindable = [p for p in _bindable(sorted(set(needed)), outermost(sorted(set(hidden))), prefixes)
                if p not in hiding]  # one that contains a place to hide: that place is covered on top
    covers: list[Cover] = []
    if closed:
        covers += [c for c in closed_folder_covers(bindable)
                   if not any(_within(Path(c.directory), place) for place in places)]
    for place in [*places, *outermost(sorted(set(hiding) - set(places)))]:
        if _shows(place, covers):
            inside = outermost([p for p in bindable if place in p.parents])
            covers.append(Cover(str(place), tuple(map(str, inside))))
    return tuple(covers)


def _bindable(paths: list[Path], places: list[Path], prefixes: set[Path]) -> list[Path]:
    """``paths`` without any that equals or contains a covered place; a Python prefix that does is
    replaced by the parts of it Python reads."""
    out: list[Path] = []
    for path in paths:
        if not any(_within(place, path) for place in places):
            out.append(path)
        elif path in prefixes:
            parts = [path / name for name in _PREFIX_PARTS if (path / name).exists()]
            out += [p for p in parts if not any(_within(place, p) for place in places)]
    return sorted(set(out))


def _shows(place: Path, covers: list[Cover]) -> bool:
    """Whether ``place`` can still be seen once ``covers`` are applied."""
    for cover in covers:
        if _within(place, Path(cover.directory)) and not any(
                _within(place, Path(p)) for p in (*cover.expose, *cover.writable)):
            return False
    return True


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _existing(paths: tuple[str, ...]) -> list[Path]:
    found = (Path(p).expanduser() for p in paths if p)
    return [p.resolve() for p in found if p.exists()]


def _enterable(directory: Path) -> bool:
    """Whether a uid that is neither owner nor in the group may pass through ``directory``."""
    try:
        return bool(directory.stat().st_mode & 0o001)
    except OSError:
        return False


def closed_folder_covers(paths: list[Path]) -> tuple[Cover, ...]:
    """Group the paths behind an unenterable directory by that directory (the topmost one)."""
    by_dir: dict[Path, list[Path]] = {}
    for path in paths:
        blocked = next((a for a in reversed(path.parents) if a != Path("/") and not _enterable(a)), None)
        if blocked is not None:
            by_dir.setdefault(blocked, []).append(path)
    return tuple(Cover(str(directory), tuple(map(str, outermost(exposed))))
                 for directory, exposed in sorted(by_dir.items()))
