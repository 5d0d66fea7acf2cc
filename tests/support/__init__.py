"""The tests' one helper package: each module serves the tests of one area.

- ``services``: a free port, waiting for a server, PostgreSQL schemas, an audit record;
- ``bundles``: trained bundles, instances, settings, contract checks (serving tests);
- ``harness``: the app through Starlette's TestClient, uvicorn in-process or a process;
- ``trail``, ``console``, ``metrics``, ``oip``, ``upstream``: the audit trail, the
  console's pages, ``/metrics``, the Open Inference Protocol server, a flaky proxy;
- ``deploy``, ``k8s``, ``lb``: the Dockerfile, the Kubernetes manifests, nginx in front
  of replicas;
- ``bench``: running a benchmark script.
"""
