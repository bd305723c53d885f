"""Reading a candidate's ``knob(...)`` declarations, and flagging values it hard-codes instead."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from evoforge.stages.tuning.param_space import Knob, ParamSpace, SpaceError, hardcoded_values, parse_space

PROGRAM = """\
import math
# EVOLVE-BLOCK-START
C = knob("C", 1.0, low=1e-3, high=1e3, log=True)
kernel = knob("kernel", "rbf", choices=["rbf", "poly"])
depth = knob("depth", 3, low=1, high=12)
model = SVC(C=knob("svc_C", 1.0, low=0.01, high=100, log=True), shift=knob("shift", -1.5, low=-2, high=2))
# EVOLVE-BLOCK-END
"""


def test_parses_each_kind_with_its_line() -> None:
    space = parse_space(PROGRAM)
    assert space.names == ("C", "kernel", "depth", "svc_C", "shift")
    by_name = {knob.name: knob for knob in space.knobs}
    assert by_name["C"] == Knob("C", "float", 1.0, low=1e-3, high=1e3, log=True, line=3)
    assert by_name["kernel"] == Knob("kernel", "categorical", "rbf", choices=("rbf", "poly"), line=4)
    assert by_name["depth"] == Knob("depth", "int", 3, low=1, high=12, line=5)
    assert by_name["svc_C"].kind == "float" and by_name["svc_C"].line == 6
    assert by_name["shift"] == Knob("shift", "float", -1.5, low=-2.0, high=2.0, line=6)
    assert isinstance(by_name["shift"].low, float)


def test_defaults_and_distributions() -> None:
    space = parse_space(PROGRAM)
    assert space.defaults() == {"C": 1.0, "kernel": "rbf", "depth": 3, "svc_C": 1.0, "shift": -1.5}
    dists = space.distributions()
    assert dists["C"] == FloatDistribution(1e-3, 1e3, log=True)
    assert dists["kernel"] == CategoricalDistribution(("rbf", "poly"))
    assert dists["depth"] == IntDistribution(1, 12)
    assert dists["shift"] == FloatDistribution(-2.0, 2.0)
    for name, value in space.defaults().items():
        assert dists[name]._contains(dists[name].to_internal_repr(value))


def test_int_knob_with_log_scale() -> None:
    (knob,) = parse_space('n = knob("n", 8, low=1, high=1024, log=True)').knobs
    assert knob.kind == "int" and knob.log
    assert knob.distribution() == IntDistribution(1, 1024, log=True)


def test_empty_space_is_falsy() -> None:
    space = parse_space("x = 1\nprint(knob)\nrt.knob('x', 1.0, low=0, high=2)\n")
    assert not space and space.empty and space.names == () and space.defaults() == {}
    assert ParamSpace() == space
    assert parse_space(PROGRAM) and not parse_space(PROGRAM).empty


def test_repeated_knob_with_the_same_spec_is_one_knob() -> None:
    code = (
        'a = knob("lr", 0.1, low=0.001, high=1.0, log=True)\n'
        'b = knob("lr", 0.1, low=1e-3, high=1, log=True)\n'
    )
    space = parse_space(code)
    assert space.names == ("lr",)
    assert space.knobs[0].line == 1


def test_parsing_never_runs_the_code() -> None:
    space = parse_space('raise SystemExit("ran")\nx = knob("x", 1, low=0, high=2)\n')
    assert space.names == ("x",)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ('x = knob("x", 1.0, low=LOW, high=2.0)', "low must be a literal"),
        ('x = knob("x", default_x, low=0.0, high=2.0)', "default must be a literal"),
        ("x = knob(name, 1.0, low=0.0, high=2.0)", "string literal"),
        ('x = knob("x", 1.0, low=0.0, high=2.0 * 3)', "high must be a literal"),
        ('x = knob("x", 1.0, low=0.0, high=2.0)\ny = knob("x", 1.0, low=0.0, high=3.0)', "different spec"),
        ('x = knob("x", 1.0, low=2.0, high=2.0)', "must be below high"),
        ('x = knob("x", 1, low=5, high=2)', "must be below high"),
        ('x = knob("x", 3.0, low=0.0, high=2.0)', "outside [0.0, 2.0]"),
        ('x = knob("x", -1, low=0, high=2)', "outside [0, 2]"),
        ('x = knob("x", "lin", choices=["rbf", "poly"])', "not one of the choices"),
        ('x = knob("x", 1, choices=[True, 2])', "not one of the choices"),
        ('x = knob("x", 0.5, low=0.0, high=2.0, log=True)', "log=True needs low > 0"),
        ('x = knob("x", 1, low=-1, high=2, log=True)', "log=True needs low > 0"),
        ('x = knob("x", 1.0, low=0.0)', "needs both low= and high="),
        ('x = knob("x", 1, high=3)', "needs both low= and high="),
        ('x = knob("x", 1.0)', "needs both low= and high="),
        ('x = knob("x", "rbf", choices=["rbf"], low=0)', "cannot be combined"),
        ('x = knob("x", "rbf", choices=["rbf"], high=1)', "cannot be combined"),
        ('x = knob("x", "rbf")', "needs choices"),
        ('x = knob("x", 1.0, low=0.0, high=2.0, step=0.1)', "unknown keyword 'step'"),
        ('x = knob("x", 1.0, **bounds)', "keyword unpacking"),
        ('x = knob("x")', "two positional arguments"),
        ('x = knob("x", 2, low=0, high=4.5)', "int default needs int low/high"),
        ('x = knob("x", "a", choices=[])', "non-empty list"),
        ('x = knob("x", 1.0, low=0.0, high=2.0, log="yes")', "log must be True or False"),
    ],
)
def test_malformed_declarations_raise_space_error(code: str, message: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(code)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert "line " in text
    if "string literal" not in message:
        assert "'x'" in text


def test_the_line_in_the_error_is_the_declaration_line() -> None:
    with pytest.raises(SpaceError, match=r"knob 'bad' \(line 3\)"):
        parse_space('a = 1\nb = knob("ok", 1, low=0, high=2)\nc = knob("bad", 5, low=0, high=2)\n')


def test_space_error_is_a_value_error() -> None:
    assert issubclass(SpaceError, ValueError)


def test_unparsable_program_raises_space_error() -> None:
    with pytest.raises(SpaceError, match="does not parse"):
        parse_space("def f(:\n")


def test_hardcoded_values_flags_keywords_and_assignments_in_the_block() -> None:
    code = (
        "C = 0.5\n"
        "# EVOLVE-BLOCK-START\n"
        "alpha = 0.25\n"
        "beta: float = -3\n"
        "model = SVC(C=1e-3, kernel='rbf', gamma=2)\n"
        "# EVOLVE-BLOCK-END\n"
        "gamma = 7\n"
    )
    flags = hardcoded_values(code, owned=["C", "alpha", "beta", "gamma", "kernel"])
    assert flags == [
        "alpha=0.25 (line 3): a value the parameter space owns, hard-coded",
        "beta=-3 (line 4): a value the parameter space owns, hard-coded",
        "C=1e-3 (line 5): a value the parameter space owns, hard-coded",
        "gamma=2 (line 5): a value the parameter space owns, hard-coded",
    ]


def test_hardcoded_values_does_not_flag_declared_knobs_unowned_names_or_non_numbers() -> None:
    code = (
        "# EVOLVE-BLOCK-START\n"
        'C = knob("C", 1.0, low=0.1, high=10.0)\n'
        "model = SVC(C=0.5, tol=1e-4, verbose=True, kernel='rbf')\n"
        "depth = compute()\n"
        "flag = True\n"
        "low = 3\n"
        "# EVOLVE-BLOCK-END\n"
    )
    assert hardcoded_values(code, owned=["C", "tol_not_this", "verbose", "kernel", "depth", "flag"]) == []
    assert hardcoded_values(code, owned=[]) == []


def test_hardcoded_values_ignores_the_bounds_inside_knob_calls() -> None:
    code = 'x = knob("x", 1.0, low=0.1, high=10.0)\n'
    assert hardcoded_values(code, owned=["low", "high"]) == []


def test_hardcoded_values_without_markers_reads_the_whole_program() -> None:
    assert hardcoded_values("def f():\n    lr = 0.01\n", owned={"lr"}) == [
        "lr=0.01 (line 2): a value the parameter space owns, hard-coded"
    ]


def test_hardcoded_values_in_an_indented_block() -> None:
    code = (
        "def build():\n"
        "    # EVOLVE-BLOCK-START\n"
        "    lr = 0.1\n"
        "    # EVOLVE-BLOCK-END\n"
        "    return lr\n"
        "lr = 0.2\n"
    )
    assert hardcoded_values(code, owned=["lr"]) == [
        "lr=0.1 (line 3): a value the parameter space owns, hard-coded"
    ]
