"""The audit console behind ``/audit``: what its pages show, and how they are drawn."""
