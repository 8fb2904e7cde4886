"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1..v3, as Kafka answers them, over
an :class:`Authorizer`'s :class:`AclStore`; and :func:`allowed`, the one authorization check
every handler calls.

- No authorizer configured (``authorizer.class.name`` empty): each answers SECURITY_DISABLED
  (54) "No Authorizer is configured", as Kafka does.
- CreateAcls and DeleteAcls need Alter on the Cluster, DescribeAcls Describe on the Cluster;
  denied: CLUSTER_AUTHORIZATION_FAILED (31) in every result (DescribeAcls: the top-level code),
  with Kafka's default message "Cluster authorization failed." (Kafka's own names its internal
  request object; a null one aborts some clients).
- CreateAcls: one result per creation, in order; an invalid binding (an unknown or ANY/MATCH
  type, an operation the resource type does not take, a Cluster not named ``kafka-cluster``)
  answers INVALID_REQUEST (42) with the reason and adds nothing, the valid ones are added.
- DescribeAcls: the bindings the filter selects (``AclBindingFilter``: null or ANY matches
  everything, MATCH every pattern covering a name), grouped by resource pattern; a filter with
  an UNKNOWN value answers INVALID_REQUEST.
- DeleteAcls: per filter, the bindings it deleted (each with error 0).

Thread safety: the store locks; these functions keep no state.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

from kio.static.primitive import i8

from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import kafka_message
from broker_embedded.server.protocol import response_schema
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)

DESCRIBE_ACLS_KEY, CREATE_ACLS_KEY, DELETE_ACLS_KEY = 29, 30, 31
VERSIONS = (1, 3)
NO_AUTHORIZER = (ErrorCode.security_disabled, "No Authorizer is configured.")
CLUSTER_DENIED = (
    ErrorCode.cluster_authorization_failed,
    kafka_message(ErrorCode.cluster_authorization_failed),
)


# CreateAcls' and DescribeAcls' answer without an error: "" (Kafka's schema default), not null
OK = (ErrorCode.none, "")


def allowed(
    authorizer: Authorizer | None,
    request: Request,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str = CLUSTER_NAME,
) -> bool:
    """May ``request``'s principal, from its host, do ``operation`` on the resource? Always
    with no authorizer (Kafka without one allows everything)."""
    if authorizer is None:
        return True
    principal = request.principal
    host = request.client_address[0]
    return authorizer.authorize(str(principal), host, operation, resource_type, name)


def register_acl_apis(apis: Any, authorizer: Authorizer | None) -> None:
    """Serve the three APIs on a :class:`KafkaApis`."""
    apis.register_responder(DESCRIBE_ACLS_KEY, *VERSIONS, lambda r: describe(r, authorizer))
    apis.register_responder(CREATE_ACLS_KEY, *VERSIONS, lambda r: create(r, authorizer))
    apis.register_responder(DELETE_ACLS_KEY, *VERSIONS, lambda r: delete(r, authorizer))


def _types(request: Request) -> Any:
    """The kio response module of the request's version (not handlers.api_context's helper:
    the handlers package imports this module's server)."""
    schema = response_schema(request.header.api_key, request.header.api_version)
    return sys.modules[schema.__module__]


def _gate(request: Request, authorizer: Authorizer | None, operation: AclOperation):
    """The (code, message) every result answers when the request may not proceed."""
    if authorizer is None:
        return NO_AUTHORIZER
    if not allowed(authorizer, request, operation, ResourceType.CLUSTER):
        return CLUSTER_DENIED
    return None


def create(request: Request, authorizer: Authorizer | None) -> Any:
    types = _types(request)
    failure = _gate(request, authorizer, AclOperation.ALTER)
    results = []
    for creation in request.body.creations:
        error = failure
        if error is None:
            try:
                binding = _binding(creation)
                binding.check()
                assert authorizer is not None
                authorizer.store.add([binding])
            except (AclError, ValueError) as e:
                error = (ErrorCode.invalid_request, str(e))
        code, message = error or OK
        results.append(types.AclCreationResult(error_code=code, error_message=message))
    return types.CreateAclsResponse(throttle_time=timedelta(0), results=tuple(results))


def describe(request: Request, authorizer: Authorizer | None) -> Any:
    types = _types(request)
    error = _gate(request, authorizer, AclOperation.DESCRIBE)
    resources: tuple = ()
    if error is None:
        assert authorizer is not None
        try:
            selector = _filter(request.body)
            bindings = [b for b in authorizer.store.acls() if selector.matches(b)]
            resources = _grouped(types, bindings)
        except ValueError as e:
            error = (ErrorCode.invalid_request, str(e))
    code, message = error or OK
    return types.DescribeAclsResponse(
        throttle_time=timedelta(0), error_code=code, error_message=message, resources=resources
    )


def delete(request: Request, authorizer: Authorizer | None) -> Any:
    types = _types(request)
    failure = _gate(request, authorizer, AclOperation.ALTER)
    results = []
    for raw in request.body.filters:
        error, matching = failure, ()
        if error is None:
            assert authorizer is not None
            try:
                gone = authorizer.store.remove(_filter(raw))
                matching = tuple(_deleted(types, b) for b in gone)
            except ValueError as e:
                error = (ErrorCode.invalid_request, str(e))
        code, message = error or (ErrorCode.none, None)  # Kafka: null here
        results.append(
            types.DeleteAclsFilterResult(
                error_code=code, error_message=message, matching_acls=matching
            )
        )
    return types.DeleteAclsResponse(throttle_time=timedelta(0), filter_results=tuple(results))


def _binding(c: Any) -> AclBinding:
    """A CreateAcls creation as a binding (ValueError for a number no enum has)."""
    pattern = ResourcePattern(
        ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type)
    )
    entry = AccessControlEntry(
        c.principal, c.host, AclOperation(c.operation), AclPermissionType(c.permission_type)
    )
    return AclBinding(pattern, entry)


def _filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter (ValueError for an UNKNOWN or unheard-of value)."""
    selector = AclBindingFilter(
        ResourceType(f.resource_type_filter),
        f.resource_name_filter,
        PatternType(f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        AclOperation(f.operation),
        AclPermissionType(f.permission_type),
    )
    values = (
        selector.resource_type,
        selector.pattern_type,
        selector.operation,
        selector.permission,
    )
    if any(v == 0 for v in values):
        raise ValueError("a filter with an UNKNOWN resource, pattern, operation or permission")
    return selector


def _grouped(types: Any, bindings: list[AclBinding]) -> tuple:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    return tuple(
        types.DescribeAclsResource(
            resource_type=i8(p.resource_type),
            resource_name=p.name,
            pattern_type=i8(p.pattern_type),
            acls=tuple(
                types.AclDescription(
                    principal=e.principal,
                    host=e.host,
                    operation=i8(e.operation),
                    permission_type=i8(e.permission),
                )
                for e in entries
            ),
        )
        for p, entries in by_pattern.items()
    )


def _deleted(types: Any, b: AclBinding) -> Any:
    p, e = b.pattern, b.entry
    return types.DeleteAclsMatchingAcl(
        error_code=ErrorCode.none,
        error_message=None,
        resource_type=i8(p.resource_type),
        resource_name=p.name,
        pattern_type=i8(p.pattern_type),
        principal=e.principal,
        host=e.host,
        operation=i8(e.operation),
        permission_type=i8(e.permission),
    )
