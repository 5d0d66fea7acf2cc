"""The mixture-of-experts gate: seeded, and a thin use of the shared trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from training.combiners.moe import MoECombiner
from training.nn.net import mlp_logits
from training.nn.trainer import Member, train_members

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values


def test_deterministic_for_fixed_random_state(case: Case) -> None:
    a = MoECombiner(random_state=7).fit(case.Z, case.evidence).weights(case.Z_test)
    b = MoECombiner(random_state=7).fit(case.Z, case.evidence).weights(case.Z_test)
    c = MoECombiner(random_state=8).fit(case.Z, case.evidence).weights(case.Z_test)
    np.testing.assert_array_equal(a, b)
    assert np.max(np.abs(a - c)) > 1e-4


def test_is_the_marginal_objective_without_prior(classification_case: Case) -> None:
    case = classification_case
    comb = MoECombiner(epochs=3, random_state=1).fit(case.Z, case.evidence)
    result = train_members(
        case.Z,
        case.evidence.log_lik,
        np.full((1, case.evidence.n, case.evidence.m), -5.0),  # unused at kl_weight 0
        [Member("marginal", 0.0)],
        epochs=3,
        random_state=1,
    )
    np.testing.assert_allclose(
        mlp_logits(case.Z_test, comb.layers_), mlp_logits(case.Z_test, result.layers[0])
    )


def test_gate_improves_on_uniform_mixture(classification_case: Case) -> None:
    case = classification_case
    w = MoECombiner(random_state=0).fit(case.Z, case.evidence).weights(case.Z)
    f = np.exp(case.evidence.log_lik)
    assert -np.mean(np.log(np.sum(w * f, axis=1))) < -np.mean(np.log(f.mean(axis=1)))
