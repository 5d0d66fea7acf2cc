"""Checking the trail's tamper evidence: ``iabma audit-verify``'s walk of the chains over
the rows as stored, and the signed checkpoints of the chains' heads kept outside the
database."""
