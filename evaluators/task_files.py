"""Which files of a task folder travel with it to Dask workers (stages/evaluation/task_shipping.py)
and into a candidate's folder (evaluators/evaluation.py).

A task folder may hold a ``.evoforgeignore`` file in gitignore syntax (read with ``pathspec``):
what it matches stays home. A file whose name looks like a secret (``SECRET_PATTERNS``: ``.env``,
``.env.*``, ``*.pem``, ``*.key``, ``*.p12``, ``*.pfx``, SSH private keys ``id_rsa``, ``id_dsa``,
``id_ecdsa``, ``id_ed25519`` and their ``_sk`` forms, ``.netrc``, ``.pypirc``, ``.git-credentials``)
is never shipped by default: it must be left out by the ignore file, or listed there explicitly
with a ``!`` negation (``!certs/ca.pem``) to travel; `unlisted_secret` says which pattern it
matched. Example::

    files = TaskFiles.of(Path("my_task"))   # reads my_task/.evoforgeignore if there is one
    files.ignored("data/raw", is_dir=True)  # True when the ignore file lists data/raw/
    files.unlisted_secret(".env")           # ".env": it looks like a secret and is not listed
    shutil.copytree(root, dest, ignore=files.copy_ignore(root))  # a candidate's copy of the folder

A candidate's copy of the folder (local runs) leaves out what the ignore file lists, as the Dask
bundle does; a secret-looking file is refused only when the folder is shipped off to Dask workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from evoforge.evaluators.task_yaml import TaskError

IGNORE_FILE = ".evoforgeignore"
SKIPPED_DIRS = ("__pycache__",)  # never copied nor shipped: the interpreter's own caches
SKIPPED_SUFFIXES = (".pyc",)
SECRET_PATTERNS = (".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa", "id_dsa", "id_ecdsa",
                   "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", ".netrc", ".pypirc", ".git-credentials")
_SECRETS = [(pattern, GitIgnoreSpec.from_lines([pattern])) for pattern in SECRET_PATTERNS]


@dataclass(frozen=True)
class TaskFiles:
    """A task folder's ignore rules: what stays home, and which secret-looking files may travel."""

    spec: GitIgnoreSpec

    @classmethod
    def of(cls, root: Path) -> TaskFiles:
        """The rules of the task folder `root` (none when it has no ``.evoforgeignore``); TaskError
        names an ignore file that cannot be read."""
        path = root / IGNORE_FILE
        try:
            lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
            return cls(GitIgnoreSpec.from_lines(lines))
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # a pattern pathspec cannot read
            raise TaskError(f"task folder {root}: {IGNORE_FILE}: {exc}") from None

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether the entry `rel` (relative to the folder, ``/``-separated) stays home."""
        return self.spec.check_file(rel + "/" if is_dir else rel).include is True

    def unlisted_secret(self, rel: str) -> str | None:
        """The secret pattern `rel`'s name matches, unless the ignore file lists it with ``!``."""
        if self.spec.check_file(rel).include is False:  # its last match is a negation: explicit
            return None
        return next((pattern for pattern, spec in _SECRETS if spec.match_file(rel)), None)

    def copy_ignore(self, root: Path) -> Callable[[str, list[str]], set[str]]:
        """A ``shutil.copytree`` ignore for a copy of `root`: the caches, and what stays home."""
        def ignore(folder: str, names: list[str]) -> set[str]:
            base = Path(folder)
            return {name for name in names
                    if name in SKIPPED_DIRS or name.endswith(SKIPPED_SUFFIXES)
                    or self.ignored((base / name).relative_to(root).as_posix(), (base / name).is_dir())}

        return ignore
