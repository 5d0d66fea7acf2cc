"""The gate's network and its trainer: the only torch code in the package."""
