"""The training side's ``iabma`` sub-commands (train, check, bench), one module each with
``add_parser`` and a ``run`` function; ``pyproject.toml`` registers them as entry points."""
