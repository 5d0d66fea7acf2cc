"""One module per ``iabma`` sub-command; each has ``add_parser`` and a ``run`` function."""
