"""``iabma audit-keygen --out PATH``: make the Ed25519 key pair that signs the audit
chains' checkpoints.

PATH gets the private key (PEM, mode 0600): give it to every server as
IABMA_AUDIT_SIGNING_KEY_FILE, and to nobody else. PATH.pub gets the public key: give it
to whoever checks the trail (``iabma audit-verify --public-key PATH.pub --checkpoints
FILE``); it checks checkpoints and cannot sign one. Existing files are never replaced.
The same pair from OpenSSL: ``openssl genpkey -algorithm ed25519 -out PATH`` and
``openssl pkey -in PATH -pubout -out PATH.pub``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from app.cli.text import command
from app.errors import CommandError, option_fault


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-keygen", "make the key pair that signs audit checkpoints", __doc__)
    p.add_argument("--out", type=Path, required=True, help="the private key's file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from app.audit.check.checkpoints import key_id

    private: Path = args.out
    public = private.with_name(private.name + ".pub")
    for path in (private, public):
        if path.exists():
            raise CommandError(option_fault("--out", str(args.out), f"would replace {path}"))
    if not private.parent.is_dir():
        raise CommandError(option_fault("--out", str(args.out), "is in no directory that exists"))
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    print(f"wrote {private} (private: IABMA_AUDIT_SIGNING_KEY_FILE) and {public} (public)")
    print(f"key id {key_id(key.public_key())}")
    return 0
