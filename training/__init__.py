"""IA-BMA training: experts, the adaptive prior, the posterior gate, and bundle export.

Nothing heavy is imported here, so ``iabma serve`` works in an image without torch.
"""
