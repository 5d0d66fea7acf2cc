"""``iabma``, the one command line: the serving side's commands live here, and the training
side adds its own through the ``iabma.commands`` entry points when it is installed."""
