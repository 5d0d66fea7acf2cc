"""The paper's experiments: protocol, the nine methods, results and plots (issue 4)."""
