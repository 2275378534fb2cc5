"""A fake Kubernetes API server for wire-level tests: ``kmock``'s emulator plus what the operator relies on.

``kmock`` (kopf's author's API emulator) serves discovery, list, watch, fetch, create, patch and delete over
real HTTP. :class:`KubeAPI` replaces its object handling with behaviour closer to a real kube-apiserver:

- ``metadata.uid``, ``resourceVersion`` (one counter, bumped on every write), ``generation`` (bumped when
  anything outside ``metadata``/``status`` changes) and ``creationTimestamp``; ``generateName``;
- ``201`` on create, ``409 AlreadyExists`` on a duplicate, ``409 Conflict`` on a stale ``resourceVersion``
  (merge patch or PUT), ``422 Invalid`` when a JSON-patch ``test`` op fails;
- status-subresource isolation: writes to the main resource keep the stored status, writes to ``/status``
  change only the status (and create drops ``status``) for resources declared with a ``status`` subresource;
- PUT/replace (Leases, ``kubernetes`` client ``replace_*``), merge, strategic-merge (as merge) and JSON patch;
- label selectors (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``) and
  ``metadata.name``/``metadata.namespace`` field selectors on list and watch;
- ``authorization.k8s.io/v1`` SubjectAccessReview answered from the same per-user denials;
- ``kind``/``apiVersion`` on lists and on every item; ``GET /api/v1/namespaces`` (namespaces are created on
  first use); discovery for the Shiftlight CRDs, Leases, Deployments, Pods, Services, Events and
  (optionally) Gateway API HTTPRoutes and InferencePools (from the published CRD); ``authentication.k8s.io/v1``
  SelfSubjectReview;
- optional bearer-token users and per-user denials (403) to exercise error paths;
- a record of every request as an :class:`APICall` (user, Kubernetes verb, API group, resource[/subresource],
  namespace or cluster scope) in :attr:`KubeAPI.calls`, so tests can prove which rights a client needs.

Run it on its own thread with :class:`KubeAPIServer` so synchronous code (the ``kubernetes`` client, kopf's
``KopfRunner``, typer's ``CliRunner``) can talk to it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
import yaml
from kmock._internal import dicts as kmock_dicts
from kmock._internal import dsl as kmock_dsl
from kmock._internal import rendering

JSON = dict[str, Any]

SHIFTLIGHT_GROUP = "shiftlight.dev"
SHIFTLIGHT_VERSION = "v1alpha1"
GATEWAY_GROUP = "gateway.networking.k8s.io"
INFERENCE_POOL_CRD = Path(__file__).resolve().parents[1] / "kube/crds/inference.networking.k8s.io_inferencepools.yaml"
"""The published InferencePool CRD (Gateway API Inference Extension), served when ``KubeAPI.inference_pools``."""

_NAMESPACES_PATH = re.compile(r"/api/v1/namespaces(?:/([^/]+))?")
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


# ----- recorded calls -----------------------------------------------------------------------------


@attrs.frozen(order=True)
class APICall:
    """One request in RBAC terms: who asked, with which verb, on which (group, resource[/subresource]), where."""

    user: str | None
    verb: str  # get, list, watch, create, update, patch, delete
    group: str  # "" for the core group
    resource: str  # plural, with "/<subresource>" when there is one
    namespace: str | None  # None: a cluster-scoped request (a cluster-scoped resource, or across all namespaces)


def request_verb(request: rendering.Request) -> str:
    """The Kubernetes verb of a request: PUT is ``update``, PATCH ``patch``, a ``watch=true`` list ``watch``."""
    if request.method == kmock.method.PUT:
        return "update"
    if request.action is None:
        return "update"
    return {
        kmock.action.LIST: "list",
        kmock.action.WATCH: "watch",
        kmock.action.FETCH: "get",
        kmock.action.CREATE: "create",
        kmock.action.UPDATE: "patch",
        kmock.action.DELETE: "delete",
    }.get(request.action, "update")


# ----- errors -----------------------------------------------------------------------------------


@attrs.frozen
class StatusError(kmock.KubernetesError):
    """An API error rendered as a clean ``metav1.Status`` (no traceback in ``details``)."""


def _not_found(kind: str, name: str | None) -> StatusError:
    return StatusError(status=404, reason="NotFound", message=f'{kind} "{name}" not found')


def _conflict(kind: str, name: str | None, why: str) -> StatusError:
    return StatusError(
        status=409,
        reason="Conflict",
        message=f'Operation cannot be fulfilled on {kind} "{name}": {why}',
    )


# ----- label and field selectors ------------------------------------------------------------------

_SET_REQ = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    parts: list[str] = []
    depth, current = 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def label_selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a Kubernetes label selector string (equality- and set-based)."""
    for req in _split_selector(selector):
        if m := _SET_REQ.match(req):
            key, op, raw_values = m.group(1), m.group(2), m.group(3)
            values = {v.strip() for v in raw_values.split(",") if v.strip()}
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and key in labels and labels[key] in values:
                return False
        elif "!=" in req:
            key, value = (s.strip() for s in req.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "==" in req or "=" in req:
            key, value = (s.strip() for s in re.split(r"==?", req, maxsplit=1))
            if labels.get(key) != value:
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


def field_selector_matches(selector: str, obj: Mapping[str, Any]) -> bool:
    """Equality field selectors on dotted paths (``metadata.name=x``, ``involvedObject.name=y``)."""
    for req in _split_selector(selector):
        negate = "!=" in req
        path, value = (s.strip() for s in re.split(r"!=|==?", req, maxsplit=1))
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
        actual = "" if current is None else str(current)
        if (actual == value) == negate:
            return False
    return True


# ----- the emulator ---------------------------------------------------------------------------------


#: The fake API's clock: a fixed instant that advances one second per stamp, so no test depends on the hour it runs.
_EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
_stamps = itertools.count()


def _now() -> str:
    return (_EPOCH + timedelta(seconds=next(_stamps))).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class KubeAPI(kmock.KubernetesEmulator):
    """A stateful fake kube-apiserver. Use as ``async with KubeAPI() as api, kmock.Server(api): ...``."""

    gateway: bool = True  # serve Gateway API HTTPRoutes in discovery
    inference_pools: bool = True  # serve InferencePools (the published CRD, INFERENCE_POOL_CRD)
    tokens: dict[str, str] = attrs.field(factory=dict)  # bearer token -> username (empty: no auth)
    denials: set[tuple[str, str, str]] = attrs.field(factory=set)  # (user, verb, resource[/sub]) -> 403
    keep_requests: int | None = None
    """Keep only the latest this many raw requests in kmock's log (``list(api)``), for long runs: kmock matches each
    request against its whole log, so a run of hours slows down quadratically. :attr:`calls` keeps every call."""

    calls: list[APICall] = attrs.field(factory=list, init=False)
    """Every resource request served (discovery excluded), in arrival order."""

    _rv: int = attrs.field(default=0, init=False)
    _namespaces: dict[str, JSON] = attrs.field(factory=dict, init=False)
    _ordered: tuple[tuple[Any, ...], list[Any]] = attrs.field(factory=lambda: ((), []), init=False)
    """kmock's reactions and the same in the order they are tried, kept while the reactions stay the same."""
    _created_rv: dict[str, int] = attrs.field(factory=dict, init=False)
    """The resourceVersion each object (by uid) was created at: a watch that replays changes made since some
    resourceVersion reports an object created since then as ADDED, and one only changed since then as MODIFIED."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fallback[kmock.method.PUT] << self._serve_replace
        self._declare_defaults()
        self._ensure_namespace("default")

    def _declare_defaults(self) -> None:
        info = kmock.ResourceInfo
        sl = f"{SHIFTLIGHT_GROUP}/{SHIFTLIGHT_VERSION}"
        status = {"status"}
        self.resources[f"{sl}/tunedservices"] = info(
            kind="TunedService", singular="tunedservice", namespaced=True, verbs=_VERBS, subresources=status,
            shortnames={"tsvc"},
        )  # fmt: skip
        self.resources[f"{sl}/trials"] = info(
            kind="Trial", singular="trial", namespaced=True, verbs=_VERBS, subresources=status
        )
        self.resources[f"{sl}/configrollouts"] = info(
            kind="ConfigRollout", singular="configrollout", namespaced=True, verbs=_VERBS, subresources=status
        )
        self.resources["coordination.k8s.io/v1/leases"] = info(
            kind="Lease", singular="lease", namespaced=True, verbs=_VERBS
        )
        self.resources["apps/v1/deployments"] = info(
            kind="Deployment", singular="deployment", namespaced=True, verbs=_VERBS, subresources={"status", "scale"}
        )
        self.resources["autoscaling/v2/horizontalpodautoscalers"] = info(
            kind="HorizontalPodAutoscaler", singular="horizontalpodautoscaler", namespaced=True, verbs=_VERBS,
            subresources=status, shortnames={"hpa"},
        )  # fmt: skip
        self.resources["v1/pods"] = info(kind="Pod", singular="pod", namespaced=True, verbs=_VERBS, subresources=status)
        self.resources["v1/namespaces"] = info(
            kind="Namespace", singular="namespace", namespaced=False, verbs=["create", "get", "list", "watch"]
        )
        self.resources["v1/services"] = info(kind="Service", singular="service", namespaced=True, verbs=_VERBS)
        self.resources["v1/events"] = info(kind="Event", singular="event", namespaced=True, verbs=_VERBS)
        self.resources["v1/configmaps"] = info(kind="ConfigMap", singular="configmap", namespaced=True, verbs=_VERBS)
        self.resources["events.k8s.io/v1/events"] = info(kind="Event", singular="event", namespaced=True, verbs=_VERBS)
        self.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = info(
            kind="CustomResourceDefinition", singular="customresourcedefinition", namespaced=False, verbs=_VERBS,
            subresources=status, shortnames={"crd", "crds"},
        )  # fmt: skip
        self.resources["authorization.k8s.io/v1/subjectaccessreviews"] = info(
            kind="SubjectAccessReview", singular="subjectaccessreview", namespaced=False, verbs=["create"]
        )
        self.resources["authentication.k8s.io/v1/selfsubjectreviews"] = info(
            kind="SelfSubjectReview", singular="selfsubjectreview", namespaced=False, verbs=["create"]
        )
        if self.gateway:
            self.resources[f"{GATEWAY_GROUP}/v1/httproutes"] = info(
                kind="HTTPRoute", singular="httproute", namespaced=True, verbs=_VERBS, subresources=status
            )
        if self.inference_pools:
            crd = yaml.safe_load(INFERENCE_POOL_CRD.read_text())["spec"]
            names = crd["names"]
            for version in (v for v in crd["versions"] if v.get("served")):
                self.resources[f"{crd['group']}/{version['name']}/{names['plural']}"] = info(
                    kind=names["kind"], singular=names["singular"], namespaced=crd["scope"] == "Namespaced",
                    verbs=_VERBS, subresources=set(version.get("subresources") or {}),
                    shortnames=set(names.get("shortNames") or ()),
                )  # fmt: skip

    # ----- plumbing ---------------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if len(raw_request.path) > 1 and raw_request.path.endswith("/"):  # e.g. the client's GET /apis/
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.with_path(raw_request.path.rstrip("/")))
        # kmock's URL parser cannot read /api/v1/namespaces[/name]: serve those paths here.
        match = _NAMESPACES_PATH.fullmatch(raw_request.path)
        if match is not None:
            await raw_request.read()
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(raw_request.method)
            if verb is None:
                watching = raw_request.query.get("watch") in ("true", "1")
                verb = "get" if match.group(1) else ("watch" if watching else "list")
            self.calls.append(APICall(self._user(raw_request.headers), verb, "", "namespaces", None))
            return await self._serve_namespaces(raw_request, match.group(1))
        return await super().__call__(raw_request)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # Skip the parent emulator's write interception: our fallback handlers own all state changes,
        # and a user-defined reaction (e.g. an injected 500) leaves the state untouched, as it should.
        self._record(request)
        self._authorize(request)
        return await self._dispatch(request)

    async def _dispatch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """kmock's reaction dispatch (``RawHandler._handle``: the highest-priority enabled reaction whose view sees
        the request serves it), with the view test done on this one request. kmock asks ``request in view``, which
        walks the whole request log through every filter for every reaction: a long run slowed down with each
        request (about 0.15 s each at a few hundred requests). Views that depend on other requests (slices, groups,
        exclusions, streams) still get kmock's own test."""
        payloads = tuple(self._payloads)
        known = self._ordered[0]
        if len(known) != len(payloads) or any(a is not b for a, b in zip(known, payloads, strict=True)):
            # reactions were added or replaced since the last request
            depth = max((len(p.priorities) for p in payloads), default=0)

            def order(index: int) -> tuple[float, ...]:
                priority = tuple(-p for p in payloads[index].priorities)
                return priority + (0,) * (depth - len(priority))

            self._ordered = (payloads, [payloads[i] for i in sorted(range(len(payloads)), key=order)])
        for payload in self._ordered[1]:
            if payload._disabled.is_set() or not self._sees(payload._source, request):
                continue
            try:
                return await payload(request)
            except rendering.ReactionMismatchError:  # either mismatch or depletion
                payload._disabled.set()
            except NotImplementedError:  # matched, but nothing to respond with
                pass
        raise NotImplementedError("no reaction matches the request")

    def _sees(self, view: kmock_dsl.View, request: rendering.Request) -> bool:
        while True:
            if view is self:
                return True  # every request served here is in this handler's log
            if type(view) is kmock_dsl.Filter:
                if not view.criteria(request):
                    return False
                view = view._source
            elif type(view) is kmock_dsl.Priority:
                view = view._source
            else:
                return request in view

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, StatusError):
            return aiohttp.web.json_response(self.status_body(exc), status=exc.status)
        return await super()._render_error(exc)

    @staticmethod
    def status_body(exc: StatusError) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": exc.message,
            "reason": exc.reason,
            "details": exc.details or {},
            "code": exc.status,
        }

    def _user(self, headers: Mapping[str, str]) -> str | None:
        auth = headers.get("Authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        return self.tokens.get(token)

    def _record(self, request: rendering.Request) -> None:
        log = self._requests
        if self.keep_requests is not None and len(log) > 2 * self.keep_requests:
            del log[: len(log) - self.keep_requests]  # on the server's loop, before this request is matched
        if request.resource is None or not request.resource.plural:
            return  # discovery (/api, /apis, /apis/<group>/<version>) needs no resource rights
        plural = request.resource.plural
        res = f"{plural}/{request.subresource}" if request.subresource else plural
        call = APICall(self._user(request.headers), request_verb(request), request.resource.group or "", res,
                       request.namespace)  # fmt: skip
        self.calls.append(call)

    def _authorize(self, request: rendering.Request) -> None:
        if not self.tokens or request.resource is None:
            return
        user = self._user(request.headers)
        if user is None:
            raise StatusError(status=401, reason="Unauthorized", message="Unauthorized")
        verb = request_verb(request)
        plural = request.resource.plural or ""
        res = f"{plural}/{request.subresource}" if request.subresource else plural
        if (user, verb, res) in self.denials or (user, "*", res) in self.denials:
            group = request.resource.group or ""
            qualified = f"{plural}.{group}" if group else plural
            where = f' in the namespace "{request.namespace}"' if request.namespace else " at the cluster scope"
            sub = f"/{request.subresource}" if request.subresource else ""
            raise StatusError(
                status=403,
                reason="Forbidden",
                message=f'{qualified}{sub} "{request.name or ""}" is forbidden: User "{user}" cannot {verb} '
                f'resource "{plural}{sub}" in API group "{group}"{where}',
            )

    def _info(self, resource: kmock.resource) -> kmock.ResourceInfo:
        if resource not in self.resources:
            raise StatusError(
                status=404, reason="NotFound", message=f"the server could not find the requested resource ({resource})"
            )
        return self.resources[resource]

    def _kind(self, resource: kmock.resource) -> str:
        return self._info(resource).kind or (resource.plural or "").capitalize()

    @staticmethod
    def _api_version(resource: kmock.resource) -> str:
        return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)

    def _qualified(self, resource: kmock.resource) -> str:
        return f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)

    def _has_status(self, resource: kmock.resource) -> bool:
        return "status" in self._info(resource).subresources

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _ensure_namespace(self, name: str) -> None:
        if name not in self._namespaces:
            self._namespaces[name] = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self._bump(),
                    "creationTimestamp": _now(),
                    "labels": {"kubernetes.io/metadata.name": name},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }

    def _live(self, resource: kmock.resource, namespace: str | None, name: str | None) -> JSON | None:
        if name is None:
            return None
        key = (resource, namespace, name)
        if key not in self.objects:
            return None
        obj = self.objects[key]
        return None if obj.deleted else copy.deepcopy(obj.raw)

    def _selected(self, request: rendering.Request) -> list[JSON]:
        labels = request.params.get("labelSelector", "")
        fields = request.params.get("fieldSelector", "")
        out: list[JSON] = []
        for (resource, namespace, _name), obj in self.objects.items():
            if resource != request.resource or obj.deleted:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            raw = copy.deepcopy(obj.raw)
            if labels and not label_selector_matches(labels, raw.get("metadata", {}).get("labels") or {}):
                continue
            if fields and not field_selector_matches(fields, raw):
                continue
            out.append(raw)
        return out

    async def _emit(self, resource: kmock.resource, kind: str, obj: JSON) -> None:
        await self._buses[resource].put({"type": kind, "object": copy.deepcopy(obj)})

    async def _store(self, resource: kmock.resource, namespace: str | None, name: str, obj: JSON) -> None:
        key = (resource, namespace, name)
        if key in self.objects:
            self.objects[key].history.append(kmock.ObjectVersion(obj))
        else:
            self.objects[key] = obj

    async def _delete_now(self, resource: kmock.resource, namespace: str | None, name: str, obj: JSON) -> None:
        self.objects[resource, namespace, name].delete()
        await self._emit(resource, "DELETED", obj)

    # ----- namespaces -----------------------------------------------------------------------------------

    async def _serve_namespaces(
        self, raw_request: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.StreamResponse:
        if raw_request.method == "GET" and raw_request.query.get("watch") == "true":
            response = aiohttp.web.StreamResponse()
            await response.prepare(raw_request)
            for ns in list(self._namespaces.values()):
                await response.write(json.dumps({"type": "ADDED", "object": ns}).encode() + b"\n")
            await asyncio.Event().wait()  # namespaces never change here; hold the stream until cancelled
            return response  # pragma: no cover
        if raw_request.method == "GET" and name is None:
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self._rv)},
                    "items": list(self._namespaces.values()),
                }
            )
        if raw_request.method == "GET" and name is not None:
            if name not in self._namespaces:
                return await self._render_error(_not_found("namespaces", name))
            return aiohttp.web.json_response(self._namespaces[name])
        if raw_request.method == "POST":
            body = await raw_request.json()
            new = str(body.get("metadata", {}).get("name", ""))
            if new in self._namespaces:
                return await self._render_error(
                    StatusError(status=409, reason="AlreadyExists", message=f'namespaces "{new}" already exists')
                )
            self._ensure_namespace(new)
            return aiohttp.web.json_response(self._namespaces[new], status=201)
        return await self._render_error(StatusError(status=405, reason="MethodNotAllowed", message="not supported"))

    # ----- reads ------------------------------------------------------------------------------------------

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        if request.resource.plural is None:  # discovery: GET /api/v1, /apis/<group>/<version>
            return await self._serve_version(request)
        kind = self._kind(request.resource)
        async with self._lock:
            items = self._selected(request)
            rv = str(self._rv)
        return {
            "apiVersion": self._api_version(request.resource),
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        assert request.resource is not None
        resource = request.resource
        labels = request.params.get("labelSelector", "")
        fields = request.params.get("fieldSelector", "")
        since = request.params.get("resourceVersion", "")
        since_rv = int(since) if since.isdigit() else 0
        yield b""

        def wanted(obj: JSON) -> bool:
            meta = obj.get("metadata", {})
            if request.namespace is not None and meta.get("namespace") != request.namespace:
                return False
            if request.name is not None and meta.get("name") != request.name:
                return False
            if labels and not label_selector_matches(labels, meta.get("labels") or {}):
                return False
            return not (fields and not field_selector_matches(fields, obj))

        async with self._lock:
            existing = [o for o in self._selected(request) if int(o["metadata"].get("resourceVersion", "0")) > since_rv]
        for obj in existing:
            if wanted(obj):
                created = self._created_rv.get(str(obj["metadata"].get("uid", "")), 0)
                yield {"type": "ADDED" if created > since_rv else "MODIFIED", "object": obj}
        async for event in self._buses[resource]:
            if wanted(event.get("object", {})):
                yield event

    async def _serve_fetch(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        async with self._lock:
            obj = self._live(request.resource, request.namespace, request.name)
        if obj is None:
            raise _not_found(self._qualified(request.resource), request.name)
        return obj

    # ----- writes -----------------------------------------------------------------------------------------

    async def _serve_create(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None
        resource = request.resource
        if resource.plural == "selfsubjectreviews":
            return await self._serve_self_review(request)
        if resource.plural == "subjectaccessreviews":
            return await self._serve_access_review(request)
        info = self._info(resource)
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            raise StatusError(status=400, reason="BadRequest", message="the request body must be a JSON object")
        obj: JSON = copy.deepcopy(body)
        meta: JSON = obj.setdefault("metadata", {})
        namespace = request.namespace or meta.get("namespace") if info.namespaced is not False else None
        if info.namespaced is not False and not namespace:
            namespace = "default"
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        name = meta.get("name")
        if not name:
            raise StatusError(
                status=422,
                reason="Invalid",
                message=f"{self._kind(resource)}: metadata.name: Required value: name or generateName is required",
            )
        async with self._lock:
            if self._live(resource, namespace, name) is not None:
                raise StatusError(
                    status=409,
                    reason="AlreadyExists",
                    message=f'{self._qualified(resource)} "{name}" already exists',
                    details={"name": name, "group": resource.group, "kind": resource.plural},
                )
            if namespace:
                self._ensure_namespace(namespace)
                meta["namespace"] = namespace
            obj["apiVersion"] = self._api_version(resource)
            obj["kind"] = self._kind(resource)
            if self._has_status(resource):
                obj.pop("status", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            meta["resourceVersion"] = self._bump()
            self._created_rv[meta["uid"]] = int(meta["resourceVersion"])
            for stale in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(stale, None)
            await self._store(resource, namespace, name, obj)
            await self._emit(resource, "ADDED", obj)
        return rendering.Response(status=201, payload=copy.deepcopy(obj))

    async def _serve_self_review(self, request: rendering.Request) -> rendering.Payload:
        user = self._user(request.headers)
        if user is None:
            raise StatusError(status=404, reason="NotFound", message="the server could not find the requested resource")
        return rendering.Response(
            status=201,
            payload={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
                "metadata": {"creationTimestamp": None},
                "status": {"userInfo": {"username": user, "groups": ["system:authenticated"]}},
            },
        )

    async def _serve_access_review(self, request: rendering.Request) -> rendering.Payload:
        """SubjectAccessReview: allowed unless ``denials`` holds (user, verb, resource[/sub]) or (user, "*", ...)."""
        body = request.data if isinstance(request.data, dict) else {}
        spec = body.get("spec") or {}
        attrs_ = spec.get("resourceAttributes") or {}
        user, verb = str(spec.get("user", "")), str(attrs_.get("verb", ""))
        res = str(attrs_.get("resource", "")) + (f"/{attrs_['subresource']}" if attrs_.get("subresource") else "")
        denied = (user, verb, res) in self.denials or (user, "*", res) in self.denials
        reason = f'user "{user}" may not {verb} {res}' if denied else "allowed by the fake API"
        return rendering.Response(
            status=201,
            payload={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "metadata": {},
                "spec": spec,
                "status": {"allowed": not denied, **({"denied": True} if denied else {}), "reason": reason},
            },
        )

    async def _serve_update(self, request: rendering.Request) -> rendering.Payload:
        """PATCH: JSON patch (with ``test``), merge patch and strategic merge patch (treated as merge)."""
        assert request.resource is not None
        resource = request.resource
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        async with self._lock:
            old = self._live(resource, request.namespace, request.name)
            if old is None:
                raise _not_found(self._qualified(resource), request.name)
            if content_type == "application/apply-patch+yaml":
                raise StatusError(
                    status=415, reason="UnsupportedMediaType", message="server-side apply is not supported"
                )
            data = request.data
            if isinstance(data, list):
                try:
                    new = jsonpatch.apply_patch(copy.deepcopy(old), data, in_place=False)
                except jsonpatch.JsonPatchTestFailed as exc:
                    raise StatusError(
                        status=422,
                        reason="Invalid",
                        message=f'{self._qualified(resource)} "{request.name}" is invalid: '
                        f"the test operation failed: {exc}",
                    ) from None
                except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                    raise StatusError(status=422, reason="Invalid", message=f"invalid JSON patch: {exc}") from None
            elif isinstance(data, dict):
                expected = (data.get("metadata") or {}).get("resourceVersion")
                if expected is not None and str(expected) != old["metadata"]["resourceVersion"]:
                    raise _conflict(
                        self._qualified(resource),
                        request.name,
                        "the object has been modified; please apply your changes to the latest version and try again",
                    )
                new = dict(kmock_dicts.merge_patch_dict(copy.deepcopy(old), data))
            else:
                raise StatusError(status=400, reason="BadRequest", message="the patch body must be JSON")
            return await self._commit(request, old, new)

    async def _serve_replace(self, request: rendering.Request) -> rendering.Payload:
        """PUT: replace the whole object (or only its status on ``/status``), guarded by resourceVersion."""
        if request.resource is None or request.name is None:
            raise StatusError(status=405, reason="MethodNotAllowed", message="PUT needs a named object")
        resource = request.resource
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            raise StatusError(status=400, reason="BadRequest", message="the request body must be a JSON object")
        async with self._lock:
            old = self._live(resource, request.namespace, request.name)
            if old is None:
                raise _not_found(self._qualified(resource), request.name)
            expected = (body.get("metadata") or {}).get("resourceVersion")
            if expected and str(expected) != old["metadata"]["resourceVersion"]:
                raise _conflict(
                    self._qualified(resource),
                    request.name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                )
            new = copy.deepcopy(body)
            new.setdefault("metadata", {})
            return await self._commit(request, old, new)

    async def _commit(self, request: rendering.Request, old: JSON, new: JSON) -> rendering.Payload:
        """Apply subresource isolation and metadata rules, bump versions, store and notify watchers."""
        assert request.resource is not None and request.name is not None
        resource = request.resource
        if request.subresource not in (None, "status"):
            raise _not_found(f"{self._qualified(resource)}/{request.subresource}", request.name)
        if self._has_status(resource):
            if request.subresource == "status":
                status = new.get("status")
                new = copy.deepcopy(old)
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        elif request.subresource == "status":
            raise _not_found(f"{self._qualified(resource)}/status", request.name)

        meta: JSON = new.setdefault("metadata", {}) or {}
        new["metadata"] = meta
        for immutable in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if immutable in old["metadata"]:
                meta[immutable] = old["metadata"][immutable]
        if old["metadata"].get("deletionTimestamp"):
            meta["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
        new["apiVersion"] = old["apiVersion"]
        new["kind"] = old["kind"]
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return old  # a no-op write changes nothing, not even the resourceVersion

        def body_of(obj: JSON) -> JSON:
            return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}

        if body_of(new) != body_of(old):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        meta["resourceVersion"] = self._bump()
        await self._store(resource, request.namespace, request.name, new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            await self._delete_now(resource, request.namespace, request.name, new)
        else:
            await self._emit(resource, "MODIFIED", new)
        return copy.deepcopy(new)

    async def _serve_delete(self, request: rendering.Request) -> rendering.Payload:
        assert request.resource is not None and request.name is not None
        resource = request.resource
        async with self._lock:
            old = self._live(resource, request.namespace, request.name)
            if old is None:
                raise _not_found(self._qualified(resource), request.name)
            meta = old["metadata"]
            if meta.get("finalizers"):
                if not meta.get("deletionTimestamp"):
                    new = copy.deepcopy(old)
                    new["metadata"]["deletionTimestamp"] = _now()
                    new["metadata"]["resourceVersion"] = self._bump()
                    await self._store(resource, request.namespace, request.name, new)
                    await self._emit(resource, "MODIFIED", new)
                    return new
                return old
            await self._delete_now(resource, request.namespace, request.name, old)
        details = {"name": request.name, "group": resource.group, "kind": resource.plural, "uid": meta.get("uid")}
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "details": details}

    # ----- test conveniences ------------------------------------------------------------------------------

    def current(self, resource: str, namespace: str | None, name: str) -> JSON | None:
        """The live object (a deep copy) or ``None``."""
        return self._live(kmock.resource(resource), namespace, name)

    def resource_version(self) -> int:
        """The latest resourceVersion handed out (every write bumps it)."""
        return self._rv

    def versions(self, resource: str, namespace: str | None, name: str) -> list[JSON]:
        """Every stored version of an object, oldest first (deletions skipped)."""
        key = (kmock.resource(resource), namespace, name)
        if key not in self.objects:
            return []
        return [copy.deepcopy(v.raw) for v in self.objects[key].history if v is not None]


# ----- running it on a thread --------------------------------------------------------------------------


class KubeAPIServer:
    """Runs a :class:`KubeAPI` on a loopback port in a background thread (for synchronous tests)."""

    def __init__(self, api: KubeAPI | None = None) -> None:
        self.api = api if api is not None else KubeAPI()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="fake-kube-api", daemon=True)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._server: kmock.Server | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return str(self._server.url).rstrip("/")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with self.api, kmock.Server(self.api) as server:
            self._server = server
            self._ready.set()
            await self._stop.wait()

    def start(self) -> KubeAPIServer:
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._error is not None:
            raise RuntimeError("the fake Kubernetes API did not start") from self._error
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(
        self, path: Path, *, user: str = "tester", token: str | None = None, namespace: str = "default"
    ) -> Path:
        """Write a kubeconfig pointing at this server, with ``user`` as the current context's user."""
        user_entry: JSON = {"token": token} if token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": user_entry}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": user, "namespace": namespace}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path


@contextmanager
def running_kube_api(api: KubeAPI | None = None) -> Iterator[KubeAPIServer]:
    """``with running_kube_api() as server: ...`` — the fake API on a free loopback port."""
    server = KubeAPIServer(api)
    server.start()
    try:
        yield server
    finally:
        server.stop()
