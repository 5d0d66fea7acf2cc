"""The posterior gate: its torch module, its trainer, the estimator and the gate features."""
