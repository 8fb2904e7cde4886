"""protocol/schemas.make(): one construction for every version of a message, and a field no
version has (a misspelt name, which dropped would be a wrong response) refused by name."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("kio")  # the protocol schemas: Python 3.11+

from broker_embedded.protocol.schemas import (  # noqa: E402
    UnknownFieldError,
    make,
    response_schema,
    types_of,
)

METADATA = 3


def _topic_class(version: int) -> type:
    return types_of(response_schema(METADATA, version)).MetadataResponseTopic


def _topic(version: int, **extra: object) -> object:
    return make(
        _topic_class(version),
        error_code=0,
        name="t",
        topic_id=uuid.UUID(int=7),
        is_internal=False,
        partitions=(),
        **extra,
    )


def test_a_field_of_another_version_is_dropped() -> None:
    assert not hasattr(_topic(1), "topic_id")  # Metadata v10+ has topic_id
    assert _topic(12).topic_id == uuid.UUID(int=7)


def test_a_field_no_version_has_is_refused_naming_class_and_field() -> None:
    with pytest.raises(UnknownFieldError) as refused:
        _topic(12, topc_authorized_operations=0)
    assert str(refused.value) == (
        "kio.schema.metadata.v12.response.MetadataResponseTopic has no field "
        "'topc_authorized_operations' in any version (its fields: error_code, is_internal, "
        "name, partitions, topic_authorized_operations, topic_id)"
    )
    assert isinstance(refused.value, TypeError)


def test_an_old_version_refuses_a_misspelt_field_too() -> None:
    with pytest.raises(
        UnknownFieldError, match="v1.response.MetadataResponseTopic has no field 'nme'"
    ):
        make(_topic_class(1), error_code=0, nme="t", is_internal=False, partitions=())
