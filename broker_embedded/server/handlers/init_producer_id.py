"""InitProducerId (API key 22), versions 0-6: producer ids for idempotent and transactional
producers.

Without a transactional id, every request gets a new producer id with epoch 0 from the controller's
counter (as Kafka's ``ProducerIdManager``; an idempotent producer that asks again after a sequence
error, v3+ with its old id and epoch, also gets a new id, as in Kafka). With a transactional id, the
transaction coordinator answers (coordinator/transaction_coordinator.py): its producer id with the
epoch bumped (fencing the previous instance), CONCURRENT_TRANSACTIONS (51) while the previous
instance's transaction is being aborted or completed (the client retries), PRODUCER_FENCED (90) for
v3+ naming an id and epoch that are not current, INVALID_TRANSACTION_TIMEOUT (50). v6's two-phase
commit (KIP-939, ``enable2_pc``) is not enabled here: TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), as
Kafka answers with it disabled. Errors answer producer id -1, epoch -1.

Serving this API switches the transaction coordinator to ``__transaction_state``
(``Controller.use_transaction_log``): from then on its state is persisted there (the topic is
created on the first write) and loaded back when the log dir opens again. A failed write of the
state answers COORDINATOR_NOT_AVAILABLE (15) or NOT_COORDINATOR (16), and the client retries.

Authorization (with an authorizer, as Kafka's): a transactional id needs Write on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53); an idempotent producer IdempotentWrite on the
Cluster or Write on some topic (CLUSTER_AUTHORIZATION_FAILED, 31).

Thread safety: the controller and the coordinator hand out ids under their locks.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from broker_embedded.coordinator.transaction_coordinator import TxnCompletion
from broker_embedded.errors import (
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    KafkaApiError,
    TransactionalIdAuthorizationFailedError,
)
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation, ResourceType

API_KEY = 22
VERSIONS = (0, 6)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    ctx.broker.controller.use_transaction_log()  # the wire API's transactions are persisted
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(init_producer_id_response, ctx))


def init_producer_id_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    error: KafkaApiError | None = None
    pid, epoch = -1, -1
    try:
        _authorize(ctx, request)
        pid, epoch = _init(ctx, request.body)
    except KafkaApiError as e:
        error = e
    return make(
        types.InitProducerIdResponse,
        throttle_time=timedelta(0),
        error_code=error_code(error),
        producer_id=pid,
        producer_epoch=epoch,
        ongoing_txn_producer_id=-1,
        ongoing_txn_producer_epoch=-1,
    )


def _authorize(ctx: ApiContext, request: Request) -> None:
    """Kafka's rule: a transactional id needs Write on it; an idempotent producer IdempotentWrite
    on the Cluster or Write on some topic."""
    txn_id = request.body.transactional_id
    refusal = None if txn_id is None else ctx.txn_refusal(request, txn_id)
    if refusal is not None:
        raise refusal
    if txn_id is None and ctx.authorizer is not None and not _idempotent_writer(ctx, request):
        raise ClusterAuthorizationFailedError(
            f"{request.principal} may neither IdempotentWrite the Cluster nor Write any topic"
        )


def _idempotent_writer(ctx: ApiContext, request: Request) -> bool:
    if ctx.allowed(request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER):
        return True
    assert ctx.authorizer is not None
    principal, host = str(request.principal), request.client_address[0]
    return ctx.authorizer.authorize_any(principal, host, AclOperation.WRITE, ResourceType.TOPIC)


def _init(ctx: ApiContext, body: Any) -> tuple[int, int]:
    transactional_id = body.transactional_id
    if transactional_id is None:
        return ctx.broker.init_producer_id()
    if getattr(body, "enable2_pc", False):
        raise TransactionalIdAuthorizationFailedError(
            f"transactional id {transactional_id!r}: two-phase commit (KIP-939) is not enabled"
        )
    timeout_ms = int(body.transaction_timeout / timedelta(milliseconds=1))
    expected = (body.producer_id, body.producer_epoch) if hasattr(body, "producer_id") else None
    controller = ctx.broker.controller
    got = controller.transaction_coordinator.init_producer_id(
        transactional_id, timeout_ms, expected
    )
    markers = controller.transaction_markers()  # started here: it also expires transactions
    if isinstance(got, TxnCompletion):  # the previous instance's transaction: abort it first
        markers.submit(got)
        raise ConcurrentTransactionsError(
            f"transactional id {transactional_id!r}: aborting the previous instance's "
            "transaction; retry"
        )
    return got
