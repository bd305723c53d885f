"""What a sandboxed evaluator needs to run the command-line tools it names (cargo, Rscript, gcc...).

An OpenEvolve evaluator for a non-Python program shells out to a toolchain (``cargo build``,
``Rscript``). As root, the sandbox runs it as a dedicated uid that cannot enter closed folders
such as ``/root`` (mode 0700), where rustup, pyenv or a user install put their tools; it sees
only what ``isolation.plan_for(..., expose=...)`` binds back. This module finds, on the
orchestrator's side when the task is loaded, the tools an evaluator names and says what the child
must be given to run them:

- a **tool name** is a string constant of ``evaluator.py`` that looks like a command (``"cargo"``,
  ``"Rscript"``) and that ``shutil.which`` finds on the orchestrator's ``PATH``, plus the usual
  tools of the program's language (``rust``: cargo, rustc; ``r``: Rscript);
- a tool whose directory everyone may enter (``/usr/bin/Rscript``) needs nothing;
- a **rustup proxy** (``~/.cargo/bin/cargo`` -> ``rustup``) is resolved with ``rustup which``
  to the toolchain it would run; that toolchain folder (``~/.rustup/toolchains/<name>``) is exposed
  read-only and its ``bin`` goes first on the child's ``PATH``, so the child runs the real
  ``cargo``/``rustc`` without rustup, without ``RUSTUP_HOME`` and without the rest of ``/root``;
- any other tool behind a closed folder: its own directory is exposed and put first on ``PATH``
  (but a version manager's ``shims`` folder: a shim needs its manager's whole root, which only
  ``sandbox.expose`` may give; the interpreter the sandbox runs is exposed by the sandbox itself).

``CARGO_HOME`` is left to its default, ``$HOME/.cargo``: the child's ``HOME`` is its private
directory, so cargo's registry cache and ``target/`` are written there and nowhere else. Nothing
here reads the orchestrator's environment beyond ``PATH`` (and rustup's own variables when it asks
rustup), and only ``PATH`` is handed on: no secret can travel. Stdlib only. Example::

    access = toolchain_access(Path("examples/rust_adaptive_sort/evaluator.py"), "rust")
    access.expose  # ('/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu',) under rustup
    dict(access.env)["PATH"]  # that toolchain's bin first, then the orchestrator's PATH
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

LANGUAGE_TOOLS = {"rust": ("cargo", "rustc"), "r": ("Rscript",), "c": ("cc",), "cpp": ("c++",)}
_COMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]{0,39}")
_RUSTUP = "rustup"
_SHIMS = "shims"  # pyenv's, rbenv's, asdf's: scripts that need their manager's root (sandbox.expose)
_RUSTUP_WHICH_TIMEOUT_S = 30


@dataclass(frozen=True)
class ToolchainAccess:
    """Paths a sandboxed evaluation may read behind closed folders, and the variables it needs."""

    tools: tuple[tuple[str, str], ...] = ()  # (name, the executable the child will run)
    expose: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # only PATH, when a tool's folder goes first on it

    def describe(self) -> str:
        """One line for logs and docs: which tools, which folders exposed."""
        if not self.tools:
            return "no tools behind closed folders"
        named = ", ".join(f"{name} ({path})" for name, path in self.tools)
        return f"{named}; exposed: {', '.join(self.expose)}"


def toolchain_access(evaluator: Path, language: str, path: str | None = None) -> ToolchainAccess:
    """What the child needs to run the tools ``evaluator`` names (and ``language``'s usual ones),
    as found on ``path`` (default: the orchestrator's ``PATH``)."""
    search = os.environ.get("PATH", os.defpath) if path is None else path
    names = sorted(set(named_commands(evaluator.read_text(encoding="utf-8")))
                   | set(LANGUAGE_TOOLS.get(language, ())))
    tools: list[tuple[str, str]] = []
    expose: list[str] = []
    for name in names:
        found = shutil.which(name, path=search)
        if found is None or Path(found).parent.name == _SHIMS or not behind_closed_folder(Path(found)):
            continue
        proxied = Path(found).resolve().name == _RUSTUP and name != _RUSTUP
        real = _rustup_target(name, Path(found), evaluator.parent, search) if proxied else Path(found)
        folder = real.parent.parent if proxied else real.parent  # a toolchain: its whole folder
        tools.append((name, str(real)))
        if str(folder) not in expose:
            expose.append(str(folder))
    if not tools:
        return ToolchainAccess()
    bins = [str(Path(p).parent) for _, p in tools]
    front = list(dict.fromkeys(bins))
    return ToolchainAccess(tuple(tools), tuple(expose),
                           (("PATH", os.pathsep.join([*front, search])),))


def named_commands(source: str) -> list[str]:
    """String constants of ``source`` that look like a command name (``"cargo"``, ``"Rscript"``)."""
    return [node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and _COMMAND.fullmatch(node.value)]


def behind_closed_folder(path: Path) -> bool:
    """True when a uid that is neither owner nor in the group cannot reach ``path``: some folder
    above it lacks the others' execute bit (``/root``, mode 0700)."""
    return any(not (folder.stat().st_mode & 0o001) for folder in path.absolute().parents
               if folder != Path("/"))


def _rustup_target(name: str, found: Path, cwd: Path, search: str) -> Path:
    """The toolchain executable the rustup proxy ``found`` would run for ``name`` in ``cwd``."""
    rustup = found.resolve()
    done = subprocess.run([str(rustup), "which", name], cwd=cwd, capture_output=True, text=True,
                          timeout=_RUSTUP_WHICH_TIMEOUT_S, env={**os.environ, "PATH": search})
    if done.returncode != 0:
        raise ToolchainError(f"rustup cannot name the {name} it would run: "
                             f"{' '.join(done.stderr.split())[:300]}")
    return Path(done.stdout.strip()).resolve()


class ToolchainError(RuntimeError):
    """A tool the evaluator names is behind a rustup proxy that cannot resolve it."""
