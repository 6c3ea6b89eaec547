"""The body budget: a request waits for room, is admitted, times out, and gives its room back
whatever happens; and the charge it is given bounds what decoding its body really costs."""
from __future__ import annotations

import io
import json
import threading
import time
import tracemalloc

import pytest
from werkzeug.test import EnvironBuilder, run_wsgi_app

from testing.builders import admission_review, mpijob
from testing.app_client import Webhook, webhook
from webhook.body_budget import (PER_REQUEST, SMALL_CHARGE, WORST_PER_BYTE, BodyBudget, MiB, NoRoom, decoding_cost,
                                 worst_cost)
from webhook.bootstrap import ServeOptions, body_budget
from webhook.review import read_json

BIG = 40 * MiB


def soon(seconds: float = 0.3) -> float:
    return time.monotonic() + seconds


def test_a_request_that_fits_is_admitted_at_once_and_gives_its_room_back():
    budget = BodyBudget(100 * MiB)
    first = budget.reserve(BIG, soon())
    second = budget.reserve(BIG, soon())
    assert budget.in_use == 2 * BIG
    first.release()
    first.release()  # twice is once
    assert budget.in_use == BIG
    second.release()
    assert budget.in_use == 0


def test_a_request_waits_for_room_and_is_admitted_when_it_is_given_back():
    budget = BodyBudget(100 * MiB)
    held = budget.reserve(80 * MiB, soon())
    threading.Timer(0.2, held.release).start()
    started = time.monotonic()
    with budget.reserve(BIG, soon(5)):
        waited = time.monotonic() - started
        assert budget.in_use == BIG
    assert 0.15 < waited < 4
    assert (budget.in_use, budget.waiting) == (0, 0)


def test_a_request_that_gets_no_room_by_its_deadline_is_refused_holding_nothing():
    budget = BodyBudget(100 * MiB)
    held = budget.reserve(80 * MiB, soon())
    started = time.monotonic()
    with pytest.raises(NoRoom) as refused:
        budget.reserve(BIG, soon(0.3))
    assert 0.25 < time.monotonic() - started < 3
    assert refused.value.retry_after == 1
    assert refused.value.message.startswith("no memory to decode this request's body within 0.")
    assert refused.value.message.endswith(" s (it needs 40 MiB; 80 of the 100 MiB this server decodes at once are "
                                          "in use); try again")
    assert (budget.in_use, budget.waiting) == (80 * MiB, 0)
    held.release()


def test_room_is_given_back_when_the_request_fails():
    budget = BodyBudget(100 * MiB)
    with pytest.raises(RuntimeError), budget.reserve(BIG, soon()):
        raise RuntimeError("a rule failed")
    assert budget.in_use == 0


def test_big_requests_wait_in_arrival_order_and_small_ones_pass_them():
    budget = BodyBudget(100 * MiB)
    held = budget.reserve(90 * MiB, soon())
    order: list[str] = []

    def wait_for(name: str, charge: int) -> None:
        with budget.reserve(charge, soon(5)):
            order.append(name)
            time.sleep(0.05)

    first = threading.Thread(target=wait_for, args=("first", 60 * MiB))
    first.start()
    while budget.waiting < 1:
        time.sleep(0.01)
    second = threading.Thread(target=wait_for, args=("second", 20 * MiB))  # would fit before "first"
    second.start()
    while budget.waiting < 2:
        time.sleep(0.01)
    with budget.reserve(SMALL_CHARGE, soon()):  # an ordinary review: in at once
        order.append("small")
    held.release()
    first.join()
    second.join()
    assert order == ["small", "first", "second"]
    assert budget.in_use == 0


def test_when_the_waiting_room_is_full_the_next_big_request_is_refused_at_once():
    budget = BodyBudget(100 * MiB, max_waiting=1)
    held = budget.reserve(90 * MiB, soon())
    waiter = threading.Thread(target=lambda: pytest.raises(NoRoom, budget.reserve, BIG, soon(0.5)))
    waiter.start()
    while budget.waiting < 1:
        time.sleep(0.01)
    started = time.monotonic()
    with pytest.raises(NoRoom, match=r"^1 large requests already wait for memory to decode their bodies"):
        budget.reserve(BIG, soon(5))
    assert time.monotonic() - started < 0.2
    waiter.join()
    held.release()


def test_a_reservation_grows_by_waiting_again_holding_nothing_and_shrinks_at_once():
    budget = BodyBudget(100 * MiB)
    room = budget.reserve(10 * MiB, soon())
    room.resize(4 * MiB, soon())
    assert budget.in_use == 4 * MiB
    other = budget.reserve(90 * MiB, soon())
    with pytest.raises(NoRoom):
        room.resize(20 * MiB, soon(0.1))
    assert budget.in_use == 90 * MiB  # nothing held while it waited, nothing after
    other.release()
    room.resize(20 * MiB, soon())
    assert budget.in_use == 20 * MiB
    room.release()


def test_a_charge_larger_than_the_budget_is_an_error_not_a_wait():
    with pytest.raises(ValueError):
        BodyBudget(100 * MiB).reserve(101 * MiB, soon())


def test_a_small_bodys_whole_charge_is_bounded_by_body_memory_over_twice_the_threads():
    budget = BodyBudget(256 * MiB, threads=8)
    assert budget.bounded_charge == 16 * MiB
    largest = (16 * MiB - PER_REQUEST) // WORST_PER_BYTE  # 66,054 bytes: about 64 KiB
    assert largest == 66_054
    assert budget.whole_charge(largest) == worst_cost(largest) == PER_REQUEST + 253 * largest
    assert budget.whole_charge(largest + 1) is None  # charged for reading, resized once read
    assert budget.whole_charge(None) is None  # chunked: its length is not known before it is read
    assert BodyBudget(64 * MiB, threads=2).bounded_charge == 16 * MiB
    assert body_budget(ServeOptions(body_memory_mib=64, threads=4)).bounded_charge == 8 * MiB


def test_every_thread_holding_a_whole_charge_takes_at_most_half_the_budget():
    threads = 8
    budget = BodyBudget(256 * MiB, threads=threads)
    largest = (budget.bounded_charge - PER_REQUEST) // WORST_PER_BYTE
    charge = budget.whole_charge(largest)
    assert charge is not None
    rooms = [budget.reserve(charge, soon(), small=True) for _ in range(threads)]
    assert budget.in_use <= budget.capacity // 2
    for room in rooms:
        room.release()
    assert budget.in_use == 0


def test_a_whole_charge_passes_waiting_requests_as_a_small_one_does():
    budget = BodyBudget(100 * MiB, threads=2)  # whole charges up to 25 MiB
    charge = budget.whole_charge(40_000)
    assert charge is not None and SMALL_CHARGE < charge <= budget.bounded_charge
    held = budget.reserve(80 * MiB, soon())
    waiter = threading.Thread(target=lambda: budget.reserve(BIG, soon(5)).release())
    waiter.start()
    while budget.waiting < 1:
        time.sleep(0.01)
    with pytest.raises(NoRoom):  # as big a charge that is not a whole one waits its turn
        budget.reserve(charge, soon(0.1))
    with budget.reserve(charge, soon(), small=True):
        assert budget.in_use == 80 * MiB + charge
    held.release()
    waiter.join()
    assert (budget.in_use, budget.waiting) == (0, 0)


# --- the charge bounds the cost ---------------------------------------------------------------

def body_of(item: bytes, size: int = 256 * 1024) -> bytes:
    return b"[" + b",".join([item] * (size // (len(item) + 1))) + b"]"


SHAPES = {
    "review": json.dumps(admission_review(mpijob())).encode(),
    "empty objects": body_of(b"{}"),
    "one-key objects": body_of(b'{"":0}'),
    "object in object": body_of(b'{"":{}}'),
    "nested lists": body_of(b"[[[[[[]]]]]]"),
    "nested one-key objects": body_of(b'{"":{"":{"":{"":{}}}}}'),
    "numbers": body_of(b"1073741824"),
    "floats": body_of(b"1.5"),
    "short strings": body_of(b'"ab"'),
    "escaped non-Latin-1": body_of(b'"\\u4e2d"'),
    "astral text": json.dumps({"a": "x" * 200_000 + "😀"}, ensure_ascii=False).encode(),
    "long ASCII string": json.dumps({"a": "x" * 200_000}).encode(),
    "brackets and commas in a string": json.dumps({"a": "[{,:}]" * 40_000}).encode(),
}


@pytest.mark.parametrize("body", SHAPES.values(), ids=SHAPES.keys())
def test_the_decoding_charge_is_at_least_what_decoding_costs(body: bytes):
    tracemalloc.start()
    try:
        read_json(bytearray(body))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= decoding_cost(body), f"{peak / len(body):.1f} bytes a body byte"


# --- in the routes ------------------------------------------------------------------------------

def test_a_body_too_costly_to_decode_is_a_413_before_it_is_decoded():
    served = webhook()
    served.client.application.extensions["mpijob-webhook"].body_budget = BodyBudget(8 * MiB)
    review = admission_review(mpijob())
    review["request"]["object"]["spec"]["x"] = [{} for _ in range(40_000)]
    status, answer = served.post("/validate", review)
    assert status == 413
    assert answer["reason"] == "RequestEntityTooLarge"
    assert answer["message"].startswith("request body would take about ")
    assert " bytes: 40030 objects and lists, " in answer["message"]
    assert answer["message"].endswith(" commas and colons), more than the 8 MiB this server decodes at once; "
                                      "no AdmissionReview does")
    assert served.decisions == []


def test_a_request_that_gets_no_room_in_time_is_a_429_with_retry_after():
    served = webhook()
    budget = served.client.application.extensions["mpijob-webhook"].body_budget = BodyBudget(8 * MiB, max_wait=0.2)
    held = budget.reserve(8 * MiB, soon())
    answer = served.client.post("/validate", data=json.dumps(admission_review(mpijob())),
                                headers={"Content-Type": "application/json"})
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "1"
    body = json.loads(answer.get_data())
    assert (body["kind"], body["code"], body["reason"], body["details"]) == (
        "Status", 429, "TooManyRequests", {"retryAfterSeconds": 1})
    assert body["message"].startswith("no memory to decode this request's body within 0.")
    held.release()
    assert served.review("/validate", admission_review(mpijob()))["response"]["allowed"] is True


@pytest.mark.parametrize("body", [b"{not json", json.dumps(admission_review(mpijob())).encode()],
                         ids=["refused", "answered"])
def test_every_request_gives_its_room_back(body: bytes):
    served = webhook()
    budget = served.client.application.extensions["mpijob-webhook"].body_budget
    served.client.post("/validate", data=body, headers={"Content-Type": "application/json"})
    assert budget.in_use == 0


def test_a_failing_rule_gives_the_room_back():
    served = webhook()
    budget = served.client.application.extensions["mpijob-webhook"].body_budget

    def broken(*args: object) -> object:
        raise RuntimeError("the admission logic failed")

    served.admission.validate = broken  # type: ignore[method-assign]
    status, _ = served.post("/validate", admission_review(mpijob()))
    assert status == 200  # answered as a refusal by unexpected_error
    assert budget.in_use == 0


@pytest.mark.parametrize(("query", "seconds"), [
    ("timeout=10s", 9.0), ("timeout=1m30s", 89.0), ("dryRun=All&timeout=1500ms", 0.5), ("", None),
    ("timeout=soon", None), ("xtimeout=5s", None),
])
def test_the_api_servers_timeout_parameter_bounds_the_wait(query: str, seconds: float | None):
    from webhook.routes import requested_wait

    assert requested_wait(query) == seconds


def held_while_deciding(served: Webhook) -> list[int]:
    """What the body budget holds while each request is decided."""
    budget = served.client.application.extensions["mpijob-webhook"].body_budget
    held: list[int] = []
    served.admission.observers.append(lambda decision: held.append(budget.in_use))
    return held


def test_a_small_body_holds_its_whole_charge_and_is_not_resized():
    served = webhook()
    held = held_while_deciding(served)
    body = json.dumps(admission_review(mpijob())).encode()
    status, _ = served.post("/validate", body)
    assert status == 200
    assert held == [worst_cost(len(body))]  # not decoding_cost(body), which a scan would give
    assert worst_cost(len(body)) > 4 * decoding_cost(body)


def test_a_body_past_the_bound_is_charged_what_its_structure_costs():
    served = webhook()
    held = held_while_deciding(served)
    review = admission_review(mpijob())
    review["request"]["object"]["metadata"]["annotations"] = {"note": "x" * 100_000}
    body = json.dumps(review).encode()
    assert served.client.application.extensions["mpijob-webhook"].body_budget.whole_charge(len(body)) is None
    status, _ = served.post("/validate", body)
    assert status == 200
    assert held == [decoding_cost(body)]


def test_a_chunked_body_is_charged_what_its_structure_costs():
    served = webhook()
    held = held_while_deciding(served)
    body = json.dumps(admission_review(mpijob())).encode()
    # The test client cannot send a body of unknown length: the app is called as gunicorn calls it.
    environ = EnvironBuilder(path="/validate", method="POST", content_type="application/json").get_environ()
    environ["wsgi.input"], environ["wsgi.input_terminated"] = io.BytesIO(body), True
    environ.pop("CONTENT_LENGTH", None)
    _, status_line, _ = run_wsgi_app(served.client.application, environ)
    assert status_line.startswith("200 ")
    assert held == [decoding_cost(body)]


def test_brackets_and_commas_inside_strings_cost_nothing_more():
    """A 7 MiB annotation of commas decodes into one string: it is charged as one."""
    body = json.dumps({"a": "," * (7 * MiB - 100)}).encode()
    assert decoding_cost(body) < 8 * len(body)
