"""Classify 8x8 images of handwritten digits: ``build_model()`` returns the model the evaluator fits."""

from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

try:
    from evoforge_knobs import knob
except ImportError:  # run outside evoforge: every knob takes its default
    def knob(name, default, **_):
        return default


# EVOLVE-BLOCK-START
C = knob("C", 1.0, low=1e-3, high=1e2, log=True)
MAX_ITER = knob("max_iter", 200, low=50, high=2000, log=True)


def build_model():
    """A fresh, unfitted classifier: standardised pixels into a multinomial logistic regression.

    The evaluator calls it once per fit and uses only ``fit(X, y)`` and ``predict(X)``, with X of
    shape (n, 64) holding pixel intensities 0..16 and y the digit labels 0..9.
    """
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=MAX_ITER))


# EVOLVE-BLOCK-END
