"""Registering experts, fitting them out-of-fold, and the ready-made expert sets."""
