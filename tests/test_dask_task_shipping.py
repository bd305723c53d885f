"""The task folder as a content-addressed bundle for Dask workers: the same files give the same
hash, a changed file a new one; `.evoforgeignore` leaves files out; links out of the folder,
special files, unlisted secret-looking files and oversized folders are refused with one line;
unpacking is safe, idempotent and complete."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from evoforge.stages.evaluation.task_shipping import ShipError, TaskBundle, pack_task, unpack


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "evaluator.py").write_text("def evaluate(p):\n    return {'combined_score': 1.0}\n")
    (root / "data").mkdir()
    (root / "data" / "cases.txt").write_text("1 2 3\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "evaluator.cpython-311.pyc").write_bytes(b"\0junk")
    return root


def test_the_same_files_give_the_same_digest_wherever_they_live(tmp_path):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "elsewhere" / "b")
    os.utime(b / "evaluator.py", (1, 1))  # times and places do not count, content does
    first, second = pack_task(a), pack_task(b)
    assert first.digest == second.digest and first.data == second.data
    assert first.files == 3 and first.size == sum(p.stat().st_size for p in
                                                  (a / "evaluator.py", a / "data/cases.txt", a / "run.sh"))
    (b / "data" / "cases.txt").write_text("1 2 4\n")
    assert pack_task(b).digest != first.digest


def test_unpacking_gives_the_folder_back_under_its_digest(tmp_path):
    bundle = pack_task(_folder(tmp_path / "task"))
    cache = tmp_path / "cache"
    local = unpack(bundle, cache)
    assert local == cache / bundle.digest
    assert (local / "data" / "cases.txt").read_text() == "1 2 3\n"
    assert os.access(local / "run.sh", os.X_OK) and not os.access(local / "evaluator.py", os.X_OK)
    assert not (local / "__pycache__").exists()
    (local / "evaluator.py").unlink()  # a cache entry counts as there while its folder is
    assert unpack(bundle, cache) == local and not (local / "evaluator.py").exists()
    assert [p.name for p in cache.iterdir()] == [bundle.digest]  # no staging folder left behind


def test_concurrent_unpacks_leave_one_complete_copy(tmp_path):
    bundle = pack_task(_folder(tmp_path / "task"))
    cache = tmp_path / "cache"
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(unpack(bundle, cache))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == {cache / bundle.digest} and len(results) == 6
    assert [p.name for p in cache.iterdir()] == [bundle.digest]
    assert (cache / bundle.digest / "evaluator.py").is_file()


def test_a_link_inside_the_folder_travels_as_a_link(tmp_path):
    root = _folder(tmp_path / "task")
    (root / "cases.txt").symlink_to("data/cases.txt")
    (root / "more").symlink_to(root / "data")  # absolute, but inside
    local = unpack(pack_task(root), tmp_path / "cache")
    assert (local / "cases.txt").is_symlink() and (local / "cases.txt").read_text() == "1 2 3\n"
    assert os.readlink(local / "more") == "data" and (local / "more" / "cases.txt").is_file()


def test_a_link_out_of_the_folder_is_refused_with_one_line(tmp_path):
    secret = tmp_path / "home" / ".env"
    secret.parent.mkdir()
    secret.write_text("OPENAI_API_KEY=sk-not-for-workers\n")
    root = _folder(tmp_path / "task")
    (root / "settings.env").symlink_to(secret)
    with pytest.raises(ShipError) as err:
        pack_task(root)
    message = str(err.value)
    assert "\n" not in message and "settings.env points outside the folder" in message
    assert "sk-not-for-workers" not in message
    (root / "settings.env").unlink()
    (root / "gone").symlink_to(tmp_path / "nothing-here")
    with pytest.raises(ShipError, match="the link gone points to .* which does not exist"):
        pack_task(root)


def test_a_special_file_is_refused(tmp_path):
    root = _folder(tmp_path / "task")
    os.mkfifo(root / "pipe")
    with pytest.raises(ShipError, match="pipe is not a regular file"):
        pack_task(root)


def test_a_folder_over_the_limit_names_the_limit(tmp_path):
    root = _folder(tmp_path / "task")
    (root / "big.bin").write_bytes(b"\0" * (2 * 2**20))
    with pytest.raises(ShipError) as err:
        pack_task(root, limit_mb=1)
    message = str(err.value)
    assert "\n" not in message and "over the 1 MB a Dask run ships" in message
    assert "SHIP_LIMIT_MB" in message
    assert pack_task(root, limit_mb=3).size > 2 * 2**20


def test_a_bundle_that_does_not_match_its_digest_is_not_unpacked(tmp_path):
    bundle = pack_task(_folder(tmp_path / "task"))
    forged = TaskBundle("0" * 64, bundle.data, bundle.files, bundle.size)
    with pytest.raises(ShipError, match="does not match its hash"):
        unpack(forged, tmp_path / "cache")
    assert not (tmp_path / "cache" / forged.digest).exists()


def test_a_hostile_tarball_cannot_write_outside_the_cache(tmp_path):
    """A bundle made by hand (not by pack_task) with a path out of its folder is stopped by the
    extraction filter."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    data = raw.getvalue()
    bundle = TaskBundle(hashlib.sha256(data).hexdigest(), gzip.compress(data), 1, 2)
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(bundle, tmp_path / "cache")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "cache" / "escaped.txt").exists()


def _names(bundle: TaskBundle) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(bundle.data))) as tar:
        return tar.getnames()


def test_the_ignore_file_leaves_entries_out_and_the_digest_stays_the_same(tmp_path):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b")
    for root in (a, b):
        (root / ".evoforgeignore").write_text("# gitignore syntax\ndata/\n*.log\n!keep.log\n")
        (root / "run.log").write_text("noise\n")
        (root / "keep.log").write_text("wanted\n")
    (b / "run.log").write_text("other noise\n")  # what is left out does not count
    (b / "data" / "cases.txt").write_text("changed\n")
    first, second = pack_task(a), pack_task(b)
    assert _names(first) == [".evoforgeignore", "evaluator.py", "keep.log", "run.sh"]
    assert first.digest == second.digest and first.data == second.data
    local = unpack(first, tmp_path / "cache")
    assert not (local / "data").exists() and (local / "keep.log").read_text() == "wanted\n"


def test_an_ignored_link_out_of_the_folder_stays_home_instead_of_failing(tmp_path):
    root = _folder(tmp_path / "task")
    (root / "outside").symlink_to(tmp_path)
    (root / ".evoforgeignore").write_text("outside\n")
    assert "outside" not in _names(pack_task(root))


@pytest.mark.parametrize("name", [".env", ".env.local", "conf/.env.production", "certs/server.pem", "tls.key",
                                  "id_ed25519", ".ssh/id_rsa", ".netrc", ".pypirc", ".git-credentials",
                                  "store.p12"])
def test_a_file_that_looks_like_a_secret_is_refused_with_one_line_naming_it(tmp_path, name):
    root = _folder(tmp_path / "task")
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("TOKEN=sk-not-for-workers\n")
    with pytest.raises(ShipError) as err:
        pack_task(root)
    message = str(err.value)
    assert "\n" not in message and "sk-not-for-workers" not in message
    assert f"{name} looks like a secret" in message
    assert f"leave it out in .evoforgeignore, or list it there as !{name} to ship it" in message


def test_a_secret_looking_file_travels_only_when_listed_with_a_negation(tmp_path):
    root = _folder(tmp_path / "task")
    (root / ".env").write_text("TOKEN=sk-not-for-workers\n")
    (root / ".env.example").write_text("TOKEN=put-yours-here\n")
    (root / ".evoforgeignore").write_text(".env\n!.env.example\n")
    names = _names(pack_task(root))
    assert ".env.example" in names and ".env" not in names
    (root / ".evoforgeignore").write_text("!.env.example\n")  # .env no longer left out: refused
    with pytest.raises(ShipError, match=r"\.env looks like a secret \(\.env\)"):
        pack_task(root)


def test_names_that_only_resemble_a_secret_travel(tmp_path):
    root = _folder(tmp_path / "task")
    harmless = {"id_rsa.pub", "id_map.csv", "environment.yaml", "keys.py", "env.txt"}
    for name in harmless:
        (root / name).write_text("public\n")
    assert harmless <= set(_names(pack_task(root)))


def test_a_dask_run_with_an_unlisted_secret_stops_before_the_cluster_starts(tmp_path, capsys):
    pytest.importorskip("prefect_dask")  # the dask extra; the dev extra (CI) installs it
    from evoforge.flows.cli import main
    from tests.guard_tasks import make_task

    task = make_task(tmp_path / "task")
    (task.root / ".env").write_text("OPENAI_API_KEY=sk-not-for-workers\n")
    code = main(["run", str(task.root), "--run-dir", str(tmp_path / "run"), "--workspace",
                 str(tmp_path / "ws"), "--executor", "dask", "--max-evals", "2", "--quiet", "--no-mlflow",
                 "--config", str(_config(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"evoforge: error: task folder {task.root.resolve()}: .env looks like a secret")
    assert "executor dask:" not in err and "Traceback" not in err and "sk-not-for-workers" not in err


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text("cognition: {enabled: false}\n")
    return config
