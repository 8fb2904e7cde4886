"""InitProducerId (API key 22), versions 0-6: producer ids for idempotent producers.

Without a transactional id, every request gets a new producer id with epoch 0 from the
controller's counter (as Kafka's ``ProducerIdManager``; an idempotent producer that asks again
after a sequence error, v3+ with its old id and epoch, also gets a new id, as in Kafka).
With a transactional id: COORDINATOR_NOT_AVAILABLE (15), since this server does not yet serve
the transaction APIs (AddPartitionsToTxn, EndTxn, ...: the next issue), and FindCoordinator
answers transaction keys the same way. Errors answer producer id -1, epoch -1.

Thread safety: the controller hands out ids under its lock.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from broker_embedded.errors import CoordinatorNotAvailableError, KafkaApiError
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request

API_KEY = 22
VERSIONS = (0, 6)
TRANSACTIONS_LATER = "this server does not serve transactions yet (transactional id {!r})"


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(init_producer_id_response, ctx))


def init_producer_id_response(ctx: ApiContext, request: Request) -> Any:
    types = response_types(request)
    transactional_id = request.body.transactional_id
    error: KafkaApiError | None = None
    pid, epoch = -1, -1
    try:
        if transactional_id is not None:
            raise CoordinatorNotAvailableError(TRANSACTIONS_LATER.format(transactional_id))
        pid, epoch = ctx.broker.init_producer_id()
    except KafkaApiError as e:
        error = e
    return make(types.InitProducerIdResponse, throttle_time=timedelta(0),
                error_code=error_code(error), producer_id=pid, producer_epoch=epoch)  # fmt: skip
