"""Defaulting and validation of the fake API server, per kind, like the real apiserver's strategies.

Owns what the real server adds to a new object (pod and job defaults, the job selector
and labels, service cluster IPs, namespace phase) and which writes it refuses: bad names
and labels (422), wrongly typed maps (400), and immutable fields (pod spec, job template,
service cluster IP, role binding roleRef). Functions mutate only the copy they are given.
It must not store objects or know about HTTP.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

from tests.fakeapi.errors import bad_request, cause, invalid
from tests.fakeapi.jsontree import clone
from tests.fakeapi.kinds import Kind

Manifest = dict[str, Any]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_POD_UPDATE_MSG = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _quote(value: Any) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


def is_qualified_name(key: str) -> bool:
    """Whether a label/annotation key is `[prefix/]name` as Kubernetes requires."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def check_name(kind: Kind, name: str) -> list[Manifest]:
    """The causes against an object name, by the naming rule of its kind."""
    field = "metadata.name"
    if kind.plural == "namespaces":
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [cause(field, f"Invalid value: {_quote(name)}: {_LABEL_MSG}")]
    elif kind.plural == "services" and not kind.group:
        if len(name) > 63 or not _DNS1035_LABEL.match(name):
            return [cause(field, f"Invalid value: {_quote(name)}: {_DNS1035_MSG}")]
    elif kind.group == "rbac.authorization.k8s.io":
        if name in (".", "..") or "/" in name or "%" in name:
            return [cause(field, f"Invalid value: {_quote(name)}: may not contain '/' or '%'")]
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [cause(field, f"Invalid value: {_quote(name)}: {_SUBDOMAIN_MSG}")]
    return []


def _check_string_map(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise bad_request(f"json: cannot unmarshal into Go struct field {where} of type map")
    for key, item in value.items():
        if not isinstance(item, str):
            raise bad_request(
                f"json: cannot unmarshal {type(item).__name__} into Go struct field "
                f"{where} of type string (key {key!r})"
            )


def check_types(kind: Kind, obj: Manifest) -> None:
    """Refuse bodies the real server could not decode into its Go types (400).

    Raises:
        ApiError: 400 BadRequest.
    """
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise bad_request(
            "json: cannot unmarshal into Go struct field .metadata of type ObjectMeta"
        )
    meta = meta or {}
    _check_string_map(meta.get("labels"), "ObjectMeta.metadata.labels")
    _check_string_map(meta.get("annotations"), "ObjectMeta.metadata.annotations")
    if kind.plural == "configmaps" and not kind.group:
        _check_string_map(obj.get("data"), "ConfigMap.data")
        _check_string_map(obj.get("binaryData"), "ConfigMap.binaryData")
    if kind.plural == "secrets" and not kind.group:
        _check_string_map(obj.get("data"), "Secret.data")
        _check_string_map(obj.get("stringData"), "Secret.stringData")
        for key, value in (obj.get("data") or {}).items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise bad_request(f"illegal base64 data in Secret.data[{key!r}]") from exc


def _check_metadata(meta: Manifest) -> list[Manifest]:
    causes: list[Manifest] = []
    for key, value in (meta.get("labels") or {}).items():
        if not is_qualified_name(key):
            causes.append(cause("metadata.labels", f"Invalid value: {_quote(key)}: bad key"))
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                cause("metadata.labels", f"Invalid value: {_quote(value)}: {_LABEL_VALUE_MSG}")
            )
    for key in meta.get("annotations") or {}:
        if not is_qualified_name(key):
            causes.append(cause("metadata.annotations", f"Invalid value: {_quote(key)}: bad key"))
    for finalizer in meta.get("finalizers") or []:
        if not isinstance(finalizer, str) or not is_qualified_name(finalizer):
            causes.append(cause("metadata.finalizers", f"Invalid value: {_quote(finalizer)}"))
    refs = meta.get("ownerReferences") or []
    for i, ref in enumerate(refs):
        for required in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(required):
                causes.append(
                    cause(
                        f"metadata.ownerReferences[{i}].{required}",
                        "Required value",
                        "FieldValueRequired",
                    )
                )
    if sum(1 for ref in refs if isinstance(ref, dict) and ref.get("controller")) > 1:
        causes.append(
            cause(
                "metadata.ownerReferences",
                "Invalid value: only one reference can have Controller set to true",
            )
        )
    return causes


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    if ":" not in tail or tail.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_pod_spec(spec: Manifest) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            if isinstance(container.get("image"), str):
                container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _qos_class(spec: Manifest) -> str:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits = r.get("limits") or {}
        requests = r.get("requests") or limits
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name)) != str(limits[name]):
                return "Burstable"
    return "Guaranteed"


def reset_status(kind: Kind, obj: Manifest) -> None:
    """Replace a new object's status by what the real server starts it with."""
    if kind.status_subresource:
        obj.pop("status", None)
    if kind.group:
        if kind.plural == "jobs":
            obj["status"] = {}
        elif kind.plural == "ingresses":
            obj["status"] = {"loadBalancer": {}}
        return
    if kind.plural == "pods":
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj.get("spec") or {})}
    elif kind.plural == "services":
        obj["status"] = {"loadBalancer": {}}
    elif kind.plural == "namespaces":
        obj["status"] = {"phase": "Active"}
    elif kind.plural == "persistentvolumeclaims":
        obj["status"] = {"phase": "Pending"}


def default_object(kind: Kind, obj: Manifest, *, allocate_cluster_ip: Callable[[], str]) -> None:
    """Fill the defaults the real server adds (idempotent: only missing fields are set)."""
    meta = obj.setdefault("metadata", {})
    spec = obj.get("spec")
    if kind.plural == "pods" and not kind.group and isinstance(spec, dict):
        _default_pod_spec(spec)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    elif kind.plural == "jobs" and isinstance(spec, dict):
        _default_job(obj, spec)
    elif kind.plural == "services" and not kind.group and isinstance(spec, dict):
        _default_service(spec, allocate_cluster_ip)
    elif kind.plural == "networkpolicies" and isinstance(spec, dict):
        # SetDefaults_NetworkPolicySpec: Ingress always, Egress too when egress rules exist.
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    elif kind.plural == "namespaces" and not kind.group:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        meta.setdefault("labels", {})[NAMESPACE_NAME_LABEL] = meta.get("name", "")
    elif kind.plural == "secrets" and not kind.group:
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None) or {}
        if string_data:
            data: Manifest = obj.setdefault("data", {}) or {}
            for key, value in string_data.items():
                data[key] = base64.b64encode(value.encode()).decode()
            obj["data"] = data


def _default_job(obj: Manifest, spec: Manifest) -> None:
    meta = obj["metadata"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    if not isinstance(template, dict):
        return
    if not spec.get("manualSelector"):
        uid = meta.get("uid", "")
        spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID_LABEL: uid}})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.setdefault(CONTROLLER_UID_LABEL, uid)
        labels.setdefault(LEGACY_CONTROLLER_UID_LABEL, uid)
        labels.setdefault(JOB_NAME_LABEL, meta.get("name", ""))
        labels.setdefault(LEGACY_JOB_NAME_LABEL, meta.get("name", ""))
    if isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"])


def _default_service(spec: Manifest, allocate_cluster_ip: Callable[[], str]) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = allocate_cluster_ip()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def _check_pod_spec(spec: Any, field: str, *, job_template: bool = False) -> list[Manifest]:
    if not isinstance(spec, dict):
        return [cause(field, "Required value", "FieldValueRequired")]
    causes: list[Manifest] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(cause(f"{field}.containers", "Required value", "FieldValueRequired"))
        containers = []
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            where = f"{field}.{group}[{i}]"
            name = container.get("name") if isinstance(container, dict) else None
            if not isinstance(name, str) or not name:
                causes.append(cause(f"{where}.name", "Required value", "FieldValueRequired"))
            elif len(name) > 63 or not _DNS1123_LABEL.match(name):
                causes.append(
                    cause(f"{where}.name", f"Invalid value: {_quote(name)}: {_LABEL_MSG}")
                )
            elif name in seen:
                causes.append(
                    cause(
                        f"{where}.name", f"Duplicate value: {_quote(name)}", "FieldValueDuplicate"
                    )
                )
            else:
                seen.add(name)
            if not isinstance(container, dict) or not container.get("image"):
                causes.append(cause(f"{where}.image", "Required value", "FieldValueRequired"))
    allowed = ("OnFailure", "Never") if job_template else ("Always", "OnFailure", "Never")
    policy = spec.get("restartPolicy")
    if policy not in allowed:
        values = ", ".join(_quote(v) for v in allowed)
        if policy is None:
            causes.append(
                cause(
                    f"{field}.restartPolicy",
                    f"Required value: valid values: {values}",
                    "FieldValueRequired",
                )
            )
        else:
            causes.append(
                cause(
                    f"{field}.restartPolicy",
                    f"Unsupported value: {_quote(policy)}: supported values: {values}",
                    "FieldValueNotSupported",
                )
            )
    gate_names = [g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]
    for i, gate in enumerate(gate_names):
        if not isinstance(gate, str) or not is_qualified_name(gate):
            causes.append(
                cause(f"{field}.schedulingGates[{i}].name", f"Invalid value: {_quote(gate)}")
            )
        elif gate_names.count(gate) > 1:
            causes.append(
                cause(
                    f"{field}.schedulingGates[{i}].name",
                    f"Duplicate value: {_quote(gate)}",
                    "FieldValueDuplicate",
                )
            )
    return causes


def _check_service(spec: Any) -> list[Manifest]:
    if not isinstance(spec, dict):
        return [cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Manifest] = []
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and not headless and spec.get("type") != "ExternalName":
        causes.append(cause("spec.ports", "Required value", "FieldValueRequired"))
    names: list[Any] = []
    for i, port in enumerate(ports):
        number = port.get("port") if isinstance(port, dict) else None
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(
                cause(
                    f"spec.ports[{i}].port",
                    f"Invalid value: {number}: must be between 1 and 65535, inclusive",
                )
            )
        names.append(port.get("name") if isinstance(port, dict) else None)
        if len(ports) > 1 and not names[-1]:
            causes.append(cause(f"spec.ports[{i}].name", "Required value", "FieldValueRequired"))
        elif names[-1] and names.count(names[-1]) > 1:
            causes.append(
                cause(
                    f"spec.ports[{i}].name",
                    f"Duplicate value: {_quote(names[-1])}",
                    "FieldValueDuplicate",
                )
            )
    return causes


def check_object(kind: Kind, obj: Manifest) -> None:
    """Validate an object as the real server does on create and update.

    Raises:
        ApiError: 422 Invalid with one cause per problem.
    """
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    causes = check_name(kind, name) if name else []
    causes += _check_metadata(meta)
    if not kind.group and kind.plural == "pods":
        causes += _check_pod_spec(obj.get("spec"), "spec")
    elif not kind.group and kind.plural == "services":
        causes += _check_service(obj.get("spec"))
    elif kind.plural == "jobs":
        template = (obj.get("spec") or {}).get("template") or {}
        causes += _check_pod_spec(template.get("spec"), "spec.template.spec", job_template=True)
    if causes:
        raise invalid(kind.kind, name, causes, kind.group)


def _names(items: Any) -> list[Any]:
    return [i.get("name") for i in items or [] if isinstance(i, dict)]


def _check_pod_update(old: Manifest, new: Manifest) -> list[Manifest]:
    old_spec = old.get("spec") or {}
    new_spec = clone(new.get("spec") or {})
    causes: list[Manifest] = []
    old_gates, new_gates = (
        _names(old_spec.get("schedulingGates")),
        _names(new_spec.get("schedulingGates")),
    )
    for gate in new_gates:
        if gate not in old_gates:
            causes.append(
                cause(
                    "spec.schedulingGates",
                    f"Forbidden: only deletion is allowed, but found new scheduling gate '{gate}'",
                    "FieldValueForbidden",
                )
            )
    old_deadline, new_deadline = (
        old_spec.get("activeDeadlineSeconds"),
        new_spec.get("activeDeadlineSeconds"),
    )
    if old_deadline is not None and (new_deadline is None or new_deadline > old_deadline):
        causes.append(
            cause(
                "spec.activeDeadlineSeconds",
                f"Invalid value: {new_deadline}: must be less than or equal to previous value",
            )
        )
    old_tolerations = old_spec.get("tolerations") or []
    if any(t not in (new_spec.get("tolerations") or []) for t in old_tolerations):
        causes.append(
            cause(
                "spec.tolerations",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
                "FieldValueForbidden",
            )
        )
    for field in ("containers", "initContainers"):
        old_list, new_list = old_spec.get(field) or [], new_spec.get(field) or []
        if len(old_list) == len(new_list):
            for old_c, new_c in zip(old_list, new_list, strict=True):
                if isinstance(new_c, dict) and isinstance(old_c, dict) and "image" in old_c:
                    new_c["image"] = old_c["image"]
    for field in (
        "activeDeadlineSeconds",
        "tolerations",
        "schedulingGates",
        "terminationGracePeriodSeconds",
    ):
        if field in old_spec:
            new_spec[field] = old_spec[field]
        else:
            new_spec.pop(field, None)
    if new_spec != old_spec:
        causes.append(cause("spec", _POD_UPDATE_MSG, "FieldValueForbidden"))
    return causes


def _immutable(old: Any, new: Any, field: str) -> list[Manifest]:
    if old == new:
        return []
    return [cause(field, f"Invalid value: {_quote(new)}: field is immutable")]


def check_update(kind: Kind, old: Manifest, new: Manifest) -> None:
    """Validate an update against the old object: immutable fields included.

    Raises:
        ApiError: 422 Invalid with one cause per problem.
    """
    check_object(kind, new)
    causes: list[Manifest] = []
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        before = old_meta.get("finalizers") or []
        added = [f for f in new_meta.get("finalizers") or [] if f not in before]
        if added:
            causes.append(
                cause(
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if "
                    "the object is being deleted, found new finalizers " + str(added),
                    "FieldValueForbidden",
                )
            )
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if not kind.group and kind.plural == "pods":
        causes += _check_pod_update(old, new)
    elif kind.plural == "jobs":
        causes += _immutable(old_spec.get("selector"), new_spec.get("selector"), "spec.selector")
        causes += _immutable(
            old_spec.get("completions"), new_spec.get("completions"), "spec.completions"
        )
        if not old_spec.get("suspend"):
            causes += _immutable(
                old_spec.get("template"), new_spec.get("template"), "spec.template"
            )
    elif not kind.group and kind.plural == "services":
        causes += _immutable(old_spec.get("clusterIP"), new_spec.get("clusterIP"), "spec.clusterIP")
    elif kind.plural == "rolebindings" and old.get("roleRef") != new.get("roleRef"):
        causes.append(
            cause("roleRef", f"Invalid value: {new.get('roleRef')}: cannot change roleRef")
        )
    if causes:
        raise invalid(kind.kind, new_meta.get("name", ""), causes, kind.group)


def carry_allocated(kind: Kind, old: Manifest, new: Manifest) -> None:
    """Keep server-allocated values an update left out (a service's cluster IP)."""
    if kind.group or kind.plural != "services":
        return
    old_spec, new_spec = old.get("spec") or {}, new.get("spec")
    if isinstance(new_spec, dict):
        for field in ("clusterIP", "clusterIPs"):
            if not new_spec.get(field) and old_spec.get(field):
                new_spec[field] = clone(old_spec[field])
