"""The combiners' names, in the paper's table order: no imports, so anything may read them."""

COMBINER_NAMES: tuple[str, ...] = (
    "best_single",
    "uniform",
    "accuracy_weighted",
    "bma",
    "moe",
    "dla",
    "smc",
    "bhs",
    "iabma",
    # What a practitioner would use instead: tuned MoE, stacking, ensemble selection.
    "moe_tuned",
    "stacking",
    "ensemble_selection",
)
#: The benchmark's rows: the combiners, the paper's literal IA-BMA, and two ablations of
#: the default IA-BMA (lambda forced to 0; no mixture temperature).
BENCH_METHODS: tuple[str, ...] = (
    *COMBINER_NAMES,
    "iabma_paper",
    "iabma_lambda0",
    "iabma_no_temp",
)
