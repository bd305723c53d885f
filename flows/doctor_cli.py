"""`evoforge doctor`'s command line: the config as `evoforge run` would load it, one line per check
(flows/doctor.py), exit 1 when something the config needs is missing."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any


def add_doctor_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check what this machine gives a run: sandbox, embedder, "
                                           "LLM, Prefect, MLflow, disk (exit 1: something needed is missing)")
    doctor.add_argument("--config", type=Path, help="YAML config file (as for evoforge run)")
    doctor.add_argument("--workspace", help="folder for runs, MLflow and cognition (as for evoforge run)")
    doctor.add_argument("--llm-base-url", help="OpenAI-compatible server (as for evoforge run)")
    doctor.add_argument("--json", action="store_true", help="the checks as JSON")


def run_doctor(ns: argparse.Namespace) -> int:
    """Load the config as `evoforge run` would, run every check, print one line each."""
    from evoforge.flows.doctor import MISSING, doctor
    from evoforge.infra.config_load import load_config

    overrides = {"workspace": ns.workspace, "llm.base_url": ns.llm_base_url}
    origins = {"workspace": "--workspace", "llm.base_url": "--llm-base-url"}
    cfg = load_config(ns.config, overrides, origins=origins)
    checks = doctor(cfg)
    if ns.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        for check in checks:
            print(check.line())
    missing = [c.part for c in checks if c.state == MISSING]
    if missing:
        print(f"[evoforge] doctor: missing what the config needs: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0
