"""A first run on a plain install (no torch, no sentence-transformers) has learn and the cognition base
on, with the ONNX MiniLM, and says so in one line at start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from evoforge.stages.learn import LearnData
from tests.helpers import cli_env, read_nodes

pytestmark = pytest.mark.slow

# torch and sentence-transformers made unimportable, as on a plain `pip install -e .`; then a short run
SCRIPT = textwrap.dedent("""
    import json, sys

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "sentence_transformers", "transformers"):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NotInstalled())
    from evoforge.flows.cli import main

    code = main(["run", "circle_packing", "--workspace", sys.argv[1], "--max-evals", "6", "--seed", "2",
                 "--no-mlflow", "--quiet"])
    print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
""")


def test_a_plain_install_runs_with_learn_and_the_onnx_cognition_base(tmp_path):
    workspace = tmp_path / "ws"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(workspace)], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "torch": False}
    said = [line for line in done.stderr.splitlines() if "cognition base" in line]
    assert len(said) == 1 and said[0].endswith("embedder onnx:all-MiniLM-L6-v2-int8"), said
    designs = [n for n in read_nodes(workspace / "circle_packing") if n.origin != "seed"]
    shown = [n for n in designs if LearnData.peek(n).cognition_ids]  # learn retrieved priors for them
    assert designs and len(shown) >= len(designs) // 2
    meta = json.loads((workspace / "cognition" / "cognition.json").read_text())
    assert meta == {"embedder": "onnx:all-MiniLM-L6-v2-int8", "dim": 384, "table": "items"}
