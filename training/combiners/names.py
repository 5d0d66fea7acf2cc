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
#: The benchmark's rows: the combiners, the paper's literal IA-BMA, and four variants of
#: the default IA-BMA (lambda forced to 0; no mixture temperature; the prior temperature
#: searched too; the regression energy at s = sigma_j).
ABLATIONS: tuple[str, ...] = ("iabma_lambda0", "iabma_no_temp", "iabma_prior_tau", "iabma_s_sigma")
BENCH_METHODS: tuple[str, ...] = (*COMBINER_NAMES, "iabma_paper", *ABLATIONS)
#: Rows that are variants of IA-BMA, not rivals to rank it against.
NOT_COMPETING: tuple[str, ...] = ("iabma_paper", *ABLATIONS)
