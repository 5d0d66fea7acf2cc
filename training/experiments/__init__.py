"""The paper's experiments behind ``iabma bench quality``: the protocol, the methods, the
results and the plots. The performance scripts are the top-level ``bench/``."""
