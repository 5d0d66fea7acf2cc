"""``results.json``: the schema accepts exactly the documented form and nothing else."""

from __future__ import annotations

import copy
import json
from typing import Any, get_args

import pytest

from training.combiners.registry import COMBINER_NAMES
from training.experiments.schema import (
    METHODS,
    METRICS,
    RESULTS_SCHEMA,
    MethodName,
    ResultsSchemaError,
    validate_results,
)


def make_results(task: str = "classification", methods: tuple[str, ...] = METHODS) -> dict:
    stat = {"mean": 0.5, "sd": 0.01}
    return {
        "dataset": "toy",
        "task": task,
        "reps": 3,
        "methods": {m: {k: dict(stat) for k in METRICS[task]} for m in methods},
        "fit_seconds": {m: dict(stat) for m in methods},
    }


def test_every_registered_combiner_is_a_benchmark_method() -> None:
    """The names live in one module; the registry must build each one of them."""
    from training.combiners.registry import make_combiner

    for name in COMBINER_NAMES:
        assert make_combiner(name).name == name
    bench_only = {
        "iabma_paper",
        "iabma_lambda0",
        "iabma_no_temp",
        "iabma_prior_tau",
        "iabma_s_sigma",
    }
    assert set(get_args(MethodName)) == set(METHODS) == {*COMBINER_NAMES, *bench_only}


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_a_well_formed_result_passes(task: str) -> None:
    data = make_results(task)
    assert validate_results(data) is data


def test_a_subset_of_methods_passes() -> None:
    data = make_results(methods=("uniform", "iabma"))
    assert validate_results(data) is data
    # The subset is checked, not waved through: fit times must name the same methods.
    del data["fit_seconds"]["iabma"]
    with pytest.raises(ValueError, match="must name the same methods"):
        validate_results(data)


def _break(path: list[Any], value: Any = None, delete: bool = False) -> dict:
    data = copy.deepcopy(make_results())
    node = data
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_break(["extra"], 1), "extra"),
        (_break(["methods", "iabma", "ece"], delete=True), "ece"),
        (_break(["methods", "iabma", "ece10"], {"mean": 0.1, "sd": 0.0}), "ece10"),
        (_break(["methods", "iabma", "rmse"], {"mean": 0.1, "sd": 0.0}), "rmse"),
        (_break(["methods", "iabma", "nll", "median"], 0.3), "median"),
        (_break(["methods", "iabma", "nll", "sd"], -0.1), "sd"),
        (_break(["methods", "iabma", "nll", "mean"], float("nan")), "mean"),
        (_break(["reps"], "3"), "reps"),
        (_break(["reps"], 0), "reps"),
        (_break(["task"], "ranking"), "task"),
        (_break(["fit_seconds"], delete=True), "fit_seconds"),
        (_break(["fit_seconds", "moe"], delete=True), "same methods"),
        (_break(["methods"], {}), "methods"),
    ],
)
def test_malformed_results_are_rejected(data: dict, fragment: str) -> None:
    with pytest.raises(ResultsSchemaError, match=fragment):
        validate_results(data)


def test_a_wrong_method_name_is_rejected() -> None:
    data = make_results()
    data["methods"]["ia_bma"] = data["methods"].pop("iabma")
    data["fit_seconds"]["ia_bma"] = data["fit_seconds"].pop("iabma")
    with pytest.raises(ResultsSchemaError, match="ia_bma"):
        validate_results(data)


def test_the_json_schema_pins_method_names_and_forbids_extras() -> None:
    text = json.dumps(RESULTS_SCHEMA)
    for name in METHODS:
        assert f'"{name}"' in text
    defs = RESULTS_SCHEMA["$defs"]
    for model in ("ClassificationResults", "RegressionResults", "Stat"):
        assert defs[model]["additionalProperties"] is False
    assert set(defs["RegressionScores"]["required"]) == set(METRICS["regression"])
    assert set(defs["ClassificationScores"]["required"]) == set(METRICS["classification"])
    methods = defs["ClassificationResults"]["properties"]["methods"]
    assert set(methods["propertyNames"]["enum"]) == set(METHODS)
