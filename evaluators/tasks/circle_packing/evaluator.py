"""Score a circle packing: 26 disjoint circles inside the unit square, maximise the sum of radii.

The program must define ``run_packing() -> (centers, radii, sum_radii)`` with ``centers`` of shape
(26, 2) and ``radii`` of shape (26,). A packing is valid when every value is finite, every radius
is > 0, every circle lies inside [0, 1]^2 (``x - r >= -TOL`` and ``x + r <= 1 + TOL``, same for y)
and no two circles overlap (``dist(i, j) >= r_i + r_j - TOL``), with ``TOL = 1e-6``. An invalid
packing raises ``ValueError`` naming the first violation. The score is the recomputed sum of the
radii (the reported ``sum_radii`` must match it); the best known value is about 2.635.
"""

import importlib.util
import sys

import numpy as np

N_CIRCLES = 26
TOL = 1e-6
BEST_KNOWN = 2.635


def _load_program(program_path):
    spec = importlib.util.spec_from_file_location("candidate_program", program_path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {program_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate_program"] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run_packing", None)):
        raise ValueError("the program defines no run_packing() function")
    return module


def _as_array(value, name, shape):
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} is not a numeric array: {exc}") from None
    if array.shape != shape:
        raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def validate_packing(centers, radii):
    """Raise ValueError naming the first violated rule; return nothing when the packing is valid."""
    for i, r in enumerate(radii):
        if r <= 0:
            raise ValueError(f"circle {i} has non-positive radius {r:.6g}")
    for i, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        excess = max(r - x, r - y, x + r - 1.0, y + r - 1.0)
        if excess > TOL:
            raise ValueError(
                f"circle {i} at ({x:.6f}, {y:.6f}) with radius {r:.6f} leaves the unit square "
                f"by {excess:.6g}"
            )
    distances = np.linalg.norm(centers[:, None, :] - centers[None, :, :], axis=-1)
    overlap = radii[:, None] + radii[None, :] - distances
    np.fill_diagonal(overlap, -np.inf)
    i, j = np.unravel_index(np.argmax(overlap), overlap.shape)
    if overlap[i, j] > TOL:
        i, j = min(i, j), max(i, j)
        raise ValueError(f"circle {i} overlaps circle {j} by {overlap[i, j]:.6g}")


def evaluate(program_path):
    """Run the program's ``run_packing()`` and return its metrics; raise on an invalid packing."""
    result = _load_program(program_path).run_packing()
    if not isinstance(result, tuple) or len(result) != 3:
        raise ValueError("run_packing() must return a tuple (centers, radii, sum_radii)")
    centers = _as_array(result[0], "centers", (N_CIRCLES, 2))
    radii = _as_array(result[1], "radii", (N_CIRCLES,))
    validate_packing(centers, radii)
    sum_radii = float(np.sum(radii))
    try:
        reported = float(result[2])
    except (TypeError, ValueError):
        raise ValueError(f"sum_radii {result[2]!r} is not a number") from None
    if not abs(reported - sum_radii) <= 1e-6 * max(1.0, abs(sum_radii)):
        raise ValueError(f"reported sum_radii {reported:.6f} != actual sum of radii {sum_radii:.6f}")
    return {
        "combined_score": sum_radii,
        "sum_radii": sum_radii,
        "target_ratio": sum_radii / BEST_KNOWN,
        "validity": 1.0,
    }
