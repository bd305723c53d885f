"""Run a command as an ordinary user from a root test process (CI runs as root).

``ensure_user()`` creates the user ``evoforge-test`` once (and reuses it after); ``run_as_user``
starts a command as that user, in a new mount namespace where each directory the user may not
enter on the way to what it needs (the interpreter and its site-packages, the repository, the
given paths: e.g. ``/root``, mode 0700, where pyenv puts Python) is covered by a tmpfs exposing
only those paths, read-only: the sandbox's own cover mechanism (evaluators/mounts.py). With
``forbid_userns`` it first enters a user namespace in which ``user.max_user_namespaces`` is 0, so
the kernel refuses the user any new user namespace, as a host with them disabled does. Example::

    done = run_as_user([sys.executable, "-c", "import os; print(os.getuid())"], home)
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from evoforge.evaluators.isolation import closed_folder_covers
from evoforge.evaluators.mounts import LIBC, MS_PRIVATE, MS_REC, apply_cover, call, mount, needed_paths

USER = "evoforge-test"
REPO = Path(__file__).resolve().parents[1]
_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000


def ensure_user() -> pwd.struct_passwd:
    """The test user, created when missing (two test processes may race: either wins)."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                       capture_output=True, check=False)
    return pwd.getpwnam(USER)


def fresh_user_home() -> Path:
    """A fresh home of the test user; a test that needs one fails in CI (root) and skips elsewhere."""
    if os.geteuid() != 0:
        import pytest  # only the tests reach here

        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("the unprivileged tests create a user: run them as root, as CI does")
        pytest.skip("the unprivileged tests create a user: run them as root")
    return make_home(ensure_user())


VALUE_EVALUATOR = """
import importlib.util
def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("p", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {result}
"""


def value_task(folder: Path, program: str = "def value():\n    return 1.5\n",
               result: str = '{"combined_score": float(module.value())}') -> Path:
    """A one-file task in ``folder``/task: `program` in an EVOLVE block, scored by ``result``."""
    task = folder / "task"
    task.mkdir()
    (task / "evaluator.py").write_text(VALUE_EVALUATOR.format(result=result))
    (task / "initial_program.py").write_text(f"# EVOLVE-BLOCK-START\n{program}# EVOLVE-BLOCK-END\n")
    return task


def make_home(user: pwd.struct_passwd) -> Path:
    """A fresh folder of ``user``'s in the temp folder (enterable by everyone: not covered)."""
    home = Path(tempfile.mkdtemp(prefix=f"{user.pw_name}-home-", dir="/tmp"))
    os.chown(home, user.pw_uid, user.pw_gid)
    return home


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A plain environment for the test user: no secret of this process, its own HOME and temp."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LANG": "C.UTF-8",
           "PREFECT_HOME": str(home / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONDONTWRITEBYTECODE": "1", "CI": os.environ.get("CI", "")}
    env.update(extra)
    return env


def run_as_user(argv: list[str], home: Path, env: dict[str, str] | None = None,
                forbid_userns: bool = False, timeout: float = 900.0,
                expose: tuple[Path, ...] = (), cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the test user in ``cwd`` (see the module doc), output captured."""
    ensure_user()  # made here, once, before any launcher looks it up
    paths = sorted({*needed_paths(), REPO, *(p.resolve() for p in expose)})
    launcher = [sys.executable, "-m", "tests.unprivileged", json.dumps(argv),
                json.dumps([str(p) for p in paths]), "forbid" if forbid_userns else "allow", str(cwd)]
    return subprocess.run(launcher, cwd=REPO, env=env or user_env(home), capture_output=True, text=True,
                          timeout=timeout)  # a fresh single-threaded Python does the rest: see _launch


def _launch(argv: list[str], paths: list[str], forbid_userns: bool, cwd: str) -> None:
    """(Forbid user namespaces,) cover, drop to the user, then exec ``argv`` in ``cwd``: in a process
    of its own, because ``unshare(CLONE_NEWUSER)`` refuses a threaded process, and a child forked
    from a test process may be one (LanceDB's fork handler starts threads in the child once it is
    loaded)."""
    _drop(ensure_user(), [Path(p) for p in paths], forbid_userns)()
    os.chdir(cwd)
    os.execvp(argv[0], argv)


def _drop(user: pwd.struct_passwd, paths: list[Path], forbid_userns: bool) -> Callable[[], None]:
    covers = closed_folder_covers(paths)

    def preexec() -> None:
        if forbid_userns:
            _enter_forbidding_userns()
        call("unshare", LIBC.unshare(_CLONE_NEWNS))
        mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
        for cover in covers:
            apply_cover(cover)
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return preexec


def _enter_forbidding_userns() -> None:
    """Enter a user namespace mapping every id to itself, in which no user namespace may be made.

    The map is written from outside (a helper forked before the unshare): a full map needs
    CAP_SETUID in the parent namespace, which this process no longer has once it is inside."""
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        code = 1
        try:
            os.close(ready_w)
            os.read(ready_r, 1)
            target = os.getppid()
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{target}/{name}").write_text("0 0 4294967295\n")
            code = 0
        finally:
            os._exit(code)
    os.close(ready_r)
    call("unshare", LIBC.unshare(_CLONE_NEWUSER))
    os.write(ready_w, b"x")
    os.close(ready_w)
    _, status = os.waitpid(helper, 0)
    if status != 0:
        raise OSError(f"could not map the ids of the test's user namespace (status {status})")
    Path("/proc/sys/user/max_user_namespaces").write_text("0\n")


def python(code: str) -> list[str]:
    """The command that runs ``code`` in this interpreter."""
    return [sys.executable, "-c", code]


if __name__ == "__main__":
    _launch(json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "forbid", sys.argv[4])
