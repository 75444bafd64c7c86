"""A connection's responses leave in request order, whatever order their handlers finish in."""

from __future__ import annotations

import asyncio
import random
import socket

import pytest

from diskless.kafka_server._server.network._responses import Answer, InOrderResponses

SEED = random.randrange(1 << 32)


async def _connection(
    answers: int,
) -> tuple[
    asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamWriter, InOrderResponses, list[Answer]
]:
    """A socket pair as streams: the client's reader and writer, the server's writer with its
    `InOrderResponses`, and that many answers added to it, none done yet."""
    left, right = socket.socketpair()
    reader, client = await asyncio.open_connection(sock=left)
    _, writer = await asyncio.open_connection(sock=right)
    responses = InOrderResponses(writer, "peer", 1)
    loop = asyncio.get_running_loop()
    added: list[Answer] = [loop.create_future() for _ in range(answers)]
    for answer in added:
        responses.add(answer)
    return reader, client, writer, responses, added


async def test_answers_finishing_in_any_order_are_written_in_request_order() -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    reader, client, writer, responses, answers = await _connection(200)
    finishing = list(enumerate(answers))
    rng.shuffle(finishing)
    for i, answer in finishing:
        answer.set_result(None if i % 7 == 0 else f"{i:04d}".encode())  # None: acks=0
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    await asyncio.wait_for(responses.drained(), 10)
    writer.close()
    received = await asyncio.wait_for(reader.read(), 10)
    expected = b"".join(f"{i:04d}".encode() for i in range(200) if i % 7)
    assert received == expected
    client.close()


async def test_room_waits_until_the_head_is_written() -> None:
    _, client, writer, responses, (head, tail) = await _connection(2)
    tail.set_result(b"t")
    room = asyncio.ensure_future(responses.room(2))
    await asyncio.sleep(0.01)
    assert not room.done()  # the tail is done, but waits behind the head
    head.set_result(b"h")
    await asyncio.wait_for(room, 10)
    assert len(responses) == 0
    writer.close()
    client.close()


async def test_a_failed_handler_aborts_the_connection_and_writes_nothing_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader, client, _, responses, answers = await _connection(3)
    answers[2].set_result(b"late")
    answers[0].set_result(b"first")
    answers[1].set_exception(RuntimeError("a bug"))
    await asyncio.wait_for(responses.drained(), 10)
    assert responses.broken
    assert await asyncio.wait_for(reader.read(), 10) == b"first"
    assert "a handler failed" in caplog.text
    client.close()
