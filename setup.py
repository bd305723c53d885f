"""Package discovery for the wheel: every folder under the five product roots is ``evoforge.<path>``.

The metadata lives in pyproject.toml; this file only says which packages there are, found on disk
(no hand-kept list), and that every non-Python file inside them (prompts, the tokenizer, the
built-in tasks, the OpenEvolve compatibility shims) ships as package data.
"""

from setuptools import find_namespace_packages, setup

ROOTS = ("flows", "stages", "evaluators", "cognition", "infra")

setup(
    package_dir={f"evoforge.{root}": root for root in ROOTS},
    packages=[f"evoforge.{name}" for name in find_namespace_packages(
        include=[f"{root}*" for root in ROOTS], exclude=["*__pycache__*"])],
    package_data={"": ["*"]},
    exclude_package_data={"": ["*.pyc"]},
)
