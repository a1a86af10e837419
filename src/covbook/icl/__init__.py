r"""In-context linear regression as gradient descent (Xu & Fang 2026, Sec. 4; book chapters 5–7).

The package is organised by concept:

* :mod:`~covbook.icl.tasks`: the task sampler (Gaussian and elliptical x), the token process;
* :mod:`~covbook.icl.construction`: the softmax head that implements one GD step;
* :mod:`~covbook.icl.streaming`: the head, linear attention and least squares along long contexts;
* :mod:`~covbook.icl.model`: stacked heads with residual connections (multi-step GD);
* :mod:`~covbook.icl.gd`: population and empirical GD, least squares, closed-form risks;
* :mod:`~covbook.icl.training`: training stacked heads; :mod:`~covbook.icl.alignment`: comparing
  a learned layer with the construction.

Every public name is re-exported here: ``covbook.icl.make_regression_tasks`` etc.
"""

from covbook.icl.alignment import bilinear_forms, construction_alignment
from covbook.icl.construction import (
    construct_gd_head,
    construction_predict,
    construction_risk_curve,
    head_predict,
    linear_attention_predict,
)
from covbook.icl.gd import (
    averaging_risk,
    empirical_gd,
    empirical_gd_risk_mc,
    gd_one_step_risk,
    gd_optimal_risk,
    gd_optimal_step,
    max_stable_step,
    ols,
    ols_risk,
    population_gd,
)
from covbook.icl.model import (
    ICLTransformer,
    causal_attention_matrix,
    power_identity_predictions,
    random_icl_transformer,
    stacked_gd_transformer,
)
from covbook.icl.streaming import icl_prediction_paths
from covbook.icl.tasks import (
    X_LAWS,
    RegressionTasks,
    RegressionTokens,
    elliptical_gain,
    make_regression_tasks,
    mixing_law,
    token_covariance,
)
from covbook.icl.training import RestartResult, TrainLog, train_icl, train_icl_restarts

__all__ = [
    "X_LAWS", "RegressionTasks", "RegressionTokens", "make_regression_tasks", "token_covariance",
    "elliptical_gain", "mixing_law", "construct_gd_head", "head_predict", "linear_attention_predict",
    "construction_predict", "construction_risk_curve", "icl_prediction_paths", "ICLTransformer",
    "stacked_gd_transformer", "random_icl_transformer", "causal_attention_matrix", "power_identity_predictions",
    "max_stable_step", "population_gd", "empirical_gd", "ols", "gd_one_step_risk", "gd_optimal_step",
    "gd_optimal_risk", "ols_risk", "averaging_risk", "empirical_gd_risk_mc", "TrainLog", "train_icl",
    "RestartResult", "train_icl_restarts",
    "bilinear_forms", "construction_alignment",
]
