"""KServe InferenceService: the pods of its predictor, transformer and explainer.

Each component is a pod spec written inline (``containers``, ``serviceAccountName``, ...) next
to KServe's own fields, or a model (``model`` with ``modelFormat`` and optional ``runtime``, or
a framework key such as ``sklearn``) whose container the serving runtime supplies. In KServe's
default deployment mode (``defaultDeploymentMode: Serverless`` in
config/configmap/inferenceservice.yaml, kserve/kserve) the controller makes each component a
Knative Service ``<isvc>-<component>`` (pkg/controller/v1beta1/inferenceservice/components),
so its pod is built here as that Service's (:mod:`classifier.workloads.knative`), labelled
``serving.kserve.io/inferenceservice`` and ``component``. A model's container is
``kserve-container`` running the runtime's image (config/runtimes/kserve-*.yaml) with the
model's resources and args; a ``storageUri`` adds the ``storage-initializer`` init container.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from classifier import podview
from classifier.podview import POD_SPEC_FIELDS, clone
from classifier.types import JSONObject
from classifier.workloads import knative
from classifier.workloads.pods import object_name

COMPONENTS = ("predictor", "transformer", "explainer")
STORAGE_INITIALIZER = "kserve/storage-initializer:latest"
# Model format -> the image of the runtime KServe selects for it (config/runtimes/).
RUNTIME_IMAGES: Mapping[str, str] = {
    "sklearn": "kserve/sklearnserver:latest",
    "xgboost": "kserve/xgbserver:latest",
    "lightgbm": "kserve/lgbserver:latest",
    "pmml": "kserve/pmmlserver:latest",
    "paddle": "kserve/paddleserver:latest",
    "huggingface": "kserve/huggingfaceserver:latest",
    "autogluon": "kserve/autogluonserver:latest",
    "tensorflow": "tensorflow/serving:latest",
    "pytorch": "pytorch/torchserve-kfs:latest",
    "triton": "nvcr.io/nvidia/tritonserver:latest",
    "tensorrt": "nvcr.io/nvidia/tritonserver:latest",
    "onnx": "nvcr.io/nvidia/tritonserver:latest",
    "mlflow": "docker.io/seldonio/mlserver:latest",
    "openvino": "openvino/model_server:latest",
}
# Container fields a model spec may carry (PredictorExtensionSpec inlines a Container).
_CONTAINER_FIELDS = (
    "args", "command", "env", "envFrom", "resources", "ports", "livenessProbe",
    "readinessProbe", "startupProbe", "securityContext", "volumeMounts", "workingDir",
    "imagePullPolicy", "image",
)  # fmt: skip


def inference_service_pods(document: Mapping[str, Any]) -> Iterator[tuple[str, JSONObject]]:
    name = object_name(document)
    spec = podview.spec(document)
    labels = {
        k: v for k, v in podview.obj(podview.metadata(document).get("labels")).items()
        if isinstance(v, str)
    }  # fmt: skip
    for component in COMPONENTS:
        part = podview.obj(spec.get(component))
        pod_spec = component_pod_spec(part)
        if pod_spec is None:
            continue
        template_labels = {
            **labels,
            **{k: v for k, v in podview.obj(part.get("labels")).items() if isinstance(v, str)},
            "serving.kserve.io/inferenceservice": name,
            "component": component,
        }
        service = {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": f"{name}-{component}"},
            "spec": {"template": {"metadata": {"labels": template_labels}, "spec": pod_spec}},
        }
        for _, pod in knative.service_pods(service):
            yield f"spec.{component}", pod


def component_pod_spec(part: Mapping[str, Any]) -> JSONObject | None:
    """The pod spec of one component: its inline pod fields, its model's container first."""
    pod_spec: JSONObject = {k: clone(v) for k, v in part.items() if k in POD_SPEC_FIELDS}
    containers = [clone(c) for c in podview.objects(part.get("containers"))]
    model, format_name = _model(part)
    storage = None
    if model is not None:
        container: JSONObject = {"name": "kserve-container"}
        container["image"] = RUNTIME_IMAGES.get(format_name, f"kserve/{format_name}server:latest")
        for field in _CONTAINER_FIELDS:
            if model.get(field) is not None:
                container[field] = clone(model[field])
        container.setdefault("args", [f"--model_name={format_name}", "--model_dir=/mnt/models"])
        storage = podview.string(model.get("storageUri"))
        # A user container named kserve-container merges into the model's (the runtime's).
        containers = [c for c in containers if c.get("name") != "kserve-container"]
        containers.insert(0, container)
    if not containers:
        return None
    pod_spec["containers"] = containers
    storage = storage or podview.string(part.get("storageUri"))
    if storage and not storage.startswith("pvc://"):
        init = [clone(c) for c in podview.objects(part.get("initContainers"))]
        init.append(
            {
                "name": "storage-initializer",
                "image": STORAGE_INITIALIZER,
                "args": [storage, "/mnt/models"],
            }
        )
        pod_spec["initContainers"] = init
    return pod_spec


def _model(part: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str]:
    model = podview.obj(part.get("model"))
    if model:
        format_name = podview.string(podview.obj(model.get("modelFormat")).get("name")) or ""
        runtime = podview.string(model.get("runtime")) or ""
        return model, (format_name or runtime.removeprefix("kserve-")).lower()
    for key in RUNTIME_IMAGES:
        framework = podview.obj(part.get(key))
        if framework:
            return framework, key
    return None, ""
