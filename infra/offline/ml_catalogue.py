"""The catalogue of scikit-learn steps the offline proposer's structural moves choose from
(infra/offline/ml_moves.py): each class, where it lives, the knobs it declares and where it may go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class KnobDef(NamedTuple):
    """A constructor parameter declared as a knob: ``param=template.format(VAR)``."""

    param: str
    suffix: str
    spec: str
    template: str = "{}"


@dataclass(frozen=True)
class Kind:
    """One catalogue entry: a class, where it lives, its knobs and how it may be placed."""

    cls: str
    module: str
    prefix: str = ""
    knobs: tuple[KnobDef, ...] = ()
    fixed: str = ""
    rank: int = -1  # order of a preprocessing step: scalers, then PCA, then feature expansion
    linear: bool = False
    baggable: bool = False


def _k(param: str, spec: str, suffix: str = "", template: str = "{}") -> KnobDef:
    """A knob declaration of `param`, named by `suffix` (default: the parameter's name)."""
    return KnobDef(param, suffix or param, spec, template)


LOG_C = "low=1e-3, high=1e2, log=True"
ESTIMATORS = (
    Kind("LogisticRegression", "sklearn.linear_model", "logreg",
          (_k("C", f"1.0, {LOG_C}"), _k("max_iter", "300, low=50, high=2000, log=True")),
          linear=True, baggable=True),
    Kind("SVC", "sklearn.svm", "svc",
          (_k("C", "10.0, low=1e-2, high=1e3, log=True"), _k("gamma", "0.01, low=1e-5, high=1.0, log=True"),
           _k("kernel", '"rbf", choices=["rbf", "poly"]')), baggable=True),
    Kind("KNeighborsClassifier", "sklearn.neighbors", "knn",
          (_k("n_neighbors", "5, low=1, high=30"),
           _k("weights", '"distance", choices=["uniform", "distance"]')),
          fixed="n_jobs=1", baggable=True),
    Kind("RandomForestClassifier", "sklearn.ensemble", "rf",
          (_k("n_estimators", "60, low=20, high=200"), _k("max_depth", "16, low=3, high=40")),
          fixed="n_jobs=1, random_state=0"),
    Kind("ExtraTreesClassifier", "sklearn.ensemble", "et",
          (_k("n_estimators", "80, low=20, high=200"), _k("max_depth", "20, low=3, high=40")),
          fixed="n_jobs=1, random_state=0"),
    Kind("MLPClassifier", "sklearn.neural_network", "mlp",
          (_k("hidden_layer_sizes", "64, low=16, high=256", "hidden", "({},)"),
           _k("alpha", "1e-4, low=1e-6, high=1e-1, log=True"), _k("max_iter", "100, low=30, high=300")),
          fixed="random_state=0"),
    Kind("LinearDiscriminantAnalysis", "sklearn.discriminant_analysis", "lda",
          (_k("shrinkage", "0.1, low=0.0, high=1.0"),), fixed='solver="lsqr"', linear=True, baggable=True),
    Kind("RidgeClassifier", "sklearn.linear_model", "ridge",
          (_k("alpha", "1.0, low=1e-3, high=1e3, log=True"),), linear=True, baggable=True),
)
TRANSFORMS = (
    Kind("StandardScaler", "sklearn.preprocessing", rank=0),
    Kind("MinMaxScaler", "sklearn.preprocessing", rank=0),
    Kind("PCA", "sklearn.decomposition", "pca",
          (_k("n_components", "30, low=8, high=60"), _k("whiten", "False, choices=[False, True]")),
          fixed="random_state=0", rank=1),
    Kind("PolynomialFeatures", "sklearn.preprocessing", fixed="interaction_only=True, include_bias=False",
          rank=2),
)
BAGGING = Kind("BaggingClassifier", "sklearn.ensemble", "bag", (_k("n_estimators", "10, low=5, high=30"),),
                 fixed="n_jobs=1, random_state=0")
CATALOGUE = {kind.cls: kind for kind in (*ESTIMATORS, *TRANSFORMS, BAGGING)}
