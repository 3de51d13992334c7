"""One lock per effect key: a second run on the key waits for the first (and is refused as busy after its
timeout); runs on other keys do not wait. PostgreSQL advisory locks; a lock in the process on SQLite."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connections

from console.effect_locks import effect_lock
from console.errors import Conflict

pytestmark = pytest.mark.django_db(transaction=True)


def holding(key: str) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A thread (its own connection) that takes `key` and holds it until released."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with effect_lock(key, timeout_s=5):
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(5)
    return held, release, thread


def in_thread(fn: Callable[[], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # handed back to the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)
    return errors


def test_a_second_run_on_a_held_key_is_refused_as_busy_after_its_wait() -> None:
    _, release, thread = holding("shop/order:W1")

    def second() -> None:
        with effect_lock("shop/order:W1", timeout_s=0.2):
            pytest.fail("the lock was taken twice")

    errors = in_thread(second)
    release.set()
    thread.join(10)

    assert len(errors) == 1 and isinstance(errors[0], Conflict) and errors[0].code == "effect_busy"


def test_a_run_on_another_key_does_not_wait() -> None:
    _, release, thread = holding("shop/order:W1")
    entered: list[str] = []

    def other() -> None:
        with effect_lock("shop/order:W2", timeout_s=0.2):
            entered.append("W2")

    errors = in_thread(other)
    release.set()
    thread.join(10)

    assert errors == [] and entered == ["W2"]


def test_a_released_key_can_be_taken_again() -> None:
    _, release, thread = holding("shop/order:W1")
    release.set()
    thread.join(10)
    entered: list[str] = []

    def again() -> None:
        with effect_lock("shop/order:W1", timeout_s=1):
            entered.append("again")

    assert in_thread(again) == [] and entered == ["again"]
