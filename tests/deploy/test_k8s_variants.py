"""What the overlays and the extra manifests under deploy/k8s/ do, offline: overriding the
image, replacing the Secret, the object-storage overlay's init container (its script run for
real, against a stand-in rclone and a real bundle), and the store admin pod."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.deploy import clean_env
from tests.support.k8s import (
    BASE,
    KUSTOMIZATION_FILE,
    OBJECT_STORAGE,
    STORE_ADMIN,
    Doc,
    SecretValue,
    container_env,
    deployment_serving,
    kserve_serving,
    kustomize,
    literal,
    load_yaml_docs,
    mounts,
    named,
    one,
    secret_data,
    selector_matches,
    volumes,
    writable_dirs,
)


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    return kustomize(BASE)


@pytest.fixture(scope="module")
def object_storage() -> list[Doc]:
    return kustomize(OBJECT_STORAGE)


# --- kustomize behaviour the README promises -----------------------------------------------


def overlay(tmp_path: Path, body: str, files: dict[str, str] | None = None) -> list[Doc]:
    """Render a throwaway overlay of the base (kustomize wants relative paths)."""
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    resources = os.path.relpath(BASE, tmp_path)
    head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    text = f"{head}resources: [{resources}]\n"
    (tmp_path / KUSTOMIZATION_FILE).write_text(text + body, encoding="utf-8")
    return kustomize(tmp_path)


def test_image_tag_is_pinned_and_overridable(base: list[Doc], tmp_path: Path) -> None:
    image = deployment_serving(base).container["image"]
    name, _, tag = image.rpartition(":")
    assert name and tag and tag != "latest", f"{image}: pin a tag"
    admin = one(load_yaml_docs(STORE_ADMIN), "Pod")
    assert admin["spec"]["containers"][0]["image"] == image, "ops/store-admin.yaml's image"
    isvc = kserve_serving().container["image"]
    assert isvc == image, "kserve/inferenceservice.yaml's image"
    docs = overlay(
        tmp_path,
        f"images:\n  - name: {name}\n    newName: registry.example/iabma\n    newTag: '9.9.9'\n",
    )
    assert deployment_serving(docs).container["image"] == "registry.example/iabma:9.9.9"


def test_a_new_secret_rolls_the_pods(base: list[Doc], tmp_path: Path) -> None:
    # Replacing the Secret the README's way renames it, so the pod template changes and
    # the Deployment rolls: settings are read once, at start.
    keys = "\n".join(f"{k}=x" for k in secret_data(one(base, "Secret")))
    keys = keys.replace("audit-url=x", "audit-url=postgresql+psycopg://u:p@db:5432/iabma")
    docs = overlay(
        tmp_path,
        "secretGenerator:\n  - {name: iabma-secrets, behavior: replace, envs: [secrets.env]}\n",
        {"secrets.env": keys + "\n"},
    )
    old = deployment_serving(base).env["IABMA_AUDIT_URL"]
    new = deployment_serving(docs).env["IABMA_AUDIT_URL"]
    assert isinstance(old, SecretValue) and isinstance(new, SecretValue)
    assert new.secret != old.secret
    assert secret_data(named(docs, "Secret", new.secret))["audit-url"].endswith("@db:5432/iabma")


def test_an_external_secret_can_take_the_placeholders_place(
    base: list[Doc], tmp_path: Path
) -> None:
    # With the placeholder deleted, the pods name `iabma-secrets` itself, which an external
    # secrets controller (or `kubectl create secret`) then provides.
    patch = "$patch: delete\napiVersion: v1\nkind: Secret\nmetadata: {name: iabma-secrets}\n"
    docs = overlay(
        tmp_path,
        "patches:\n  - patch: |-\n" + "".join(f"      {line}\n" for line in patch.splitlines()),
    )
    assert not [d for d in docs if d["kind"] == "Secret"]
    refs = {v.secret for v in deployment_serving(docs).env.values() if isinstance(v, SecretValue)}
    assert refs == {"iabma-secrets"}, refs


# --- the object-storage overlay ------------------------------------------------------------


def test_object_storage_overlay_copies_into_a_read_only_store(
    object_storage: list[Doc],
) -> None:
    docs = object_storage
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"], "no shared claim here"
    s = deployment_serving(docs)
    store = literal(s.env, "IABMA_STORE")
    volume = volumes(s.pod)[mounts(s.container)[store]["name"]]
    assert set(volume) == {"name", "emptyDir"}, volume
    [fetch] = s.pod["initContainers"]
    fetch_env = container_env(fetch, docs)
    assert literal(fetch_env, "IABMA_STORE") == store
    assert literal(fetch_env, "IABMA_MODEL_NAME") == literal(s.env, "IABMA_MODEL_NAME")
    fetch_mount = mounts(fetch)[store]
    assert fetch_mount["name"] == volume["name"] and not fetch_mount.get("readOnly", False)
    assert literal(fetch_env, "HOME") in writable_dirs(s.pod, fetch)


def run_fetch_script(
    docs: list[Doc], tmp_path: Path, bucket: Path, version: str = ""
) -> subprocess.CompletedProcess[str]:
    """The init container's script, run by /bin/sh with a stand-in rclone whose remote
    `store:` is the directory ``bucket``."""
    [fetch] = deployment_serving(docs).pod["initContainers"]
    command = fetch["command"]
    assert command[:2] == ["/bin/sh", "-ec"], command
    fake = tmp_path / "bin"
    fake.mkdir()
    rclone = fake / "rclone"
    rclone.write_text(
        "#!/bin/sh\nset -eu\nsub=${2#store:}\n"
        'case "$1" in\n'
        '  cat) cat "$FAKE_BUCKET/$sub" ;;\n'
        '  copy) shift; while [ "${1#--}" != "$1" ]; do shift; done\n'
        '        src=$FAKE_BUCKET/${1#store:}; mkdir -p "$2"; cp -R "$src/." "$2/" ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
        "esac\n",
        encoding="utf-8",
    )
    rclone.chmod(0o755)
    env = container_env(fetch, docs)
    source = literal(env, "BUNDLE_SOURCE")
    assert source.startswith("store:"), source
    run_env = clean_env(
        PATH=f"{fake}{os.pathsep}{os.environ['PATH']}",
        FAKE_BUCKET=str(bucket),
        BUNDLE_SOURCE=source,
        IABMA_STORE=str(tmp_path / "store"),
        IABMA_MODEL_NAME=literal(env, "IABMA_MODEL_NAME"),
        IABMA_MODEL_VERSION=version,
    )
    return subprocess.run(
        command, env=run_env, capture_output=True, text=True, timeout=60, check=False
    )


def test_fetch_script_copies_a_bundle_the_app_accepts(
    object_storage: list[Doc], demo_store: Path, tmp_path: Path
) -> None:
    from app.bundle.loader import read_manifest, resolve_version, verify_files

    docs = object_storage
    source = literal(
        container_env(deployment_serving(docs).pod["initContainers"][0], docs), "BUNDLE_SOURCE"
    )
    bucket = tmp_path / "bucket"
    shutil.copytree(demo_store / "demo", bucket / source.removeprefix("store:") / "demo")
    res = run_fetch_script(docs, tmp_path, bucket)
    assert res.returncode == 0, res.stderr
    store = tmp_path / "store"
    copied = resolve_version(store, "demo")
    original = resolve_version(demo_store, "demo")
    assert copied.name == original.name
    verify_files(copied, read_manifest(copied))  # every sha256 as in the manifest
    cmp = filecmp.dircmp(original, copied)
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files), cmp.report()


def test_fetch_script_takes_a_pinned_version_without_reading_latest(
    object_storage: list[Doc], demo_store: Path, tmp_path: Path
) -> None:
    from app.bundle.loader import resolve_version

    docs = object_storage
    source = literal(
        container_env(deployment_serving(docs).pod["initContainers"][0], docs), "BUNDLE_SOURCE"
    )
    bucket = tmp_path / "bucket"
    name = bucket / source.removeprefix("store:") / "demo"
    shutil.copytree(demo_store / "demo", name)
    version = resolve_version(demo_store, "demo").name
    (name / "LATEST").write_text("some-other-version\n", encoding="utf-8")
    res = run_fetch_script(docs, tmp_path, bucket, version=version)
    assert res.returncode == 0, res.stderr
    assert resolve_version(tmp_path / "store", "demo").name == version


@pytest.mark.parametrize("latest", ["../../etc", "", ".hidden", "v1;rm"])
def test_fetch_script_refuses_a_version_that_could_leave_the_store(
    object_storage: list[Doc], tmp_path: Path, latest: str
) -> None:
    docs = object_storage
    source = literal(
        container_env(deployment_serving(docs).pod["initContainers"][0], docs), "BUNDLE_SOURCE"
    )
    name = tmp_path / "bucket" / source.removeprefix("store:") / "demo"
    name.mkdir(parents=True)
    (name / "LATEST").write_text(latest + "\n", encoding="utf-8")
    res = run_fetch_script(docs, tmp_path, tmp_path / "bucket")
    assert res.returncode != 0 and "bad version" in res.stderr, res
    assert not (tmp_path / "store" / "demo" / "LATEST").exists()


# --- the store admin pod -------------------------------------------------------------------


def test_store_admin_pod_writes_the_store_and_takes_no_traffic(base: list[Doc]) -> None:
    pod = one(load_yaml_docs(STORE_ADMIN), "Pod")
    labels = pod["metadata"]["labels"]
    assert not selector_matches(one(base, "Service")["spec"]["selector"], labels)
    assert not selector_matches(
        one(base, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels
    )
    [c] = pod["spec"]["containers"]
    store = literal(container_env(c, []), "IABMA_STORE")
    mount = mounts(c)[store]
    assert not mount.get("readOnly", False), "the admin pod publishes: read-write"
    claim = volumes(pod["spec"])[mount["name"]]["persistentVolumeClaim"]
    assert claim["claimName"] == one(base, "PersistentVolumeClaim")["metadata"]["name"]
    assert not claim.get("readOnly", False)
    assert pod["spec"]["activeDeadlineSeconds"] <= 24 * 3600, "a forgotten pod must end"
