"""IA-BMA serving: loads a bundle from ``models_store`` and serves it over HTTP.

Importing this package is cheap and pulls in neither torch nor ``training``.
"""
