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
)
#: The benchmark's rows: the nine methods and the paper's literal IA-BMA.
BENCH_METHODS: tuple[str, ...] = (*COMBINER_NAMES, "iabma_paper")
