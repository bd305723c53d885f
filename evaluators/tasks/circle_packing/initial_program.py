"""Pack 26 circles into the unit square so that the sum of their radii is as large as possible."""

import numpy as np


# EVOLVE-BLOCK-START
def construct_packing():
    """Place 26 circle centres on concentric rings and give each the largest radius that fits.

    Returns:
        centers: (26, 2) array of (x, y) centres inside the unit square
        radii: (26,) array of radii
        sum_radii: the sum of the radii
    """
    n = 26
    rings = [  # (number of circles, ring radius, angle offset in radians)
        (1, 0.0, 0.0),
        (8, 0.25, 0.0),
        (17, 0.45, 0.1),
    ]
    centers = []
    for count, ring_radius, offset in rings:
        for k in range(count):
            angle = offset + 2.0 * np.pi * k / count
            centers.append([0.5 + ring_radius * np.cos(angle), 0.5 + ring_radius * np.sin(angle)])
    centers = np.clip(np.array(centers[:n]), 0.02, 0.98)
    radii = compute_max_radii(centers)
    return centers, radii, float(np.sum(radii))


def compute_max_radii(centers):
    """Largest radii for fixed centres: limit by the walls, then shrink overlapping pairs."""
    radii = np.minimum.reduce(
        [centers[:, 0], centers[:, 1], 1.0 - centers[:, 0], 1.0 - centers[:, 1]]
    )
    for _ in range(2):
        for i in range(len(centers)):
            for j in range(i + 1, len(centers)):
                distance = np.linalg.norm(centers[i] - centers[j])
                if radii[i] + radii[j] > distance:
                    scale = distance / (radii[i] + radii[j])
                    radii[i] *= scale
                    radii[j] *= scale
    return radii


# EVOLVE-BLOCK-END


def run_packing():
    """Entry point called by the evaluator."""
    centers, radii, sum_radii = construct_packing()
    return centers, radii, sum_radii
