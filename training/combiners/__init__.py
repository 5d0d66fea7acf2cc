"""Ways to weight the experts: the baselines (docs/method.md, "Baselines"), IA-BMA's gate
with its selection and fallback, and the registry that names them all."""
