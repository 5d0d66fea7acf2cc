"""Ways to weight the experts: IA-BMA's eight baselines (METHOD.md §5) and their registry."""
