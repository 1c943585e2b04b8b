"""Every model request takes one road: ``agent.model_calls.ModelCalls.complete`` (the spend gate before,
the usage record after). A new call site that went to a provider some other way would skip both; this
reads the code to make sure none does."""

from __future__ import annotations

import ast

from tests.house.test_layering import ROOT, modules

SEAM = "agent/model_calls.py"
RETRIES = "agent/providers/retry.py"  # the one attempt loop, called by the seam only


def calls(attribute: str) -> dict[str, list[str]]:
    """Per module, the receivers of every call ``<receiver>.<attribute>(...)`` or ``<attribute>(...)``."""
    found: dict[str, list[str]] = {}
    for package in ("agent", "gateway", "adapters"):
        for path in modules(package):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                function = node.func
                if isinstance(function, ast.Attribute) and function.attr == attribute:
                    receiver = ast.unparse(function.value)
                elif isinstance(function, ast.Name) and function.id == attribute:
                    receiver = ""
                else:
                    continue
                found.setdefault(str(path.relative_to(ROOT)), []).append(receiver)
    return found


def test_only_the_seam_sends_model_requests() -> None:
    assert set(calls("send_once")) == {SEAM}
    senders = {module: receivers for module, receivers in calls("complete").items() if module != RETRIES}
    # everything else that says .complete( asks the seam (``self.calls`` / ``agent.calls``)
    receivers = {receiver for found in senders.values() for receiver in found}
    assert receivers <= {"self.calls", "agent.calls"}, senders
    assert calls("complete")[RETRIES] == ["provider"]


def test_the_seam_gates_before_it_sends_and_records_after() -> None:
    source = (ROOT / SEAM).read_text(encoding="utf-8")
    steps = ("gate.admit(", "send_once(", "store.usage.record(")
    admit, send, record = (source.index(step) for step in steps)
    assert admit < send < record


def test_paid_services_are_paid_through_the_seam_too() -> None:
    """Speech, transcription and web search are billed like model requests (``agent.paid``): only the
    seam's ``pay`` sends a ``ServiceCall``, after the gate admitted its price and before its usage is
    recorded; a synthesizer is asked only by the seam, a transcriber and a search provider only inside
    the ``ServiceCall`` handed to it."""
    assert set(calls("synthesize")) == {SEAM}
    source = (ROOT / SEAM).read_text(encoding="utf-8")
    pay = source[source.index("async def pay(") :]
    admit, send, record = (pay.index(step) for step in ("gate.admit(", "call.send()", "store.usage.record("))
    assert admit < send < record
    services = (
        ("transcribe", "transcriber", "gateway/conversation/media.py"),
        ("search", "provider", "agent/tools/web/tools.py"),
    )
    # `herald doctor` asks the search service one query when the owner runs it: no session, no chat
    doctor = {"gateway/doctor/web.py"}
    for method, receiver, home in services:
        senders = {
            module
            for module, receivers in calls(method).items()
            if any(found.endswith(receiver) for found in receivers)
        }
        assert senders - doctor == {home}, senders
        text = (ROOT / home).read_text(encoding="utf-8")
        assert text.index("ServiceCall(") < text.index(f"{receiver}.{method}(") < text.index(".pay(")


def test_batch_requests_take_the_seam_too() -> None:
    """A request sent through a batch API (half price, ``agent.batching``) is admitted and recorded by the
    seam like any other: only the batch road submits one, and only the seam asks the road, after the gate
    admitted it."""
    assert set(calls("submit_batch")) == {"agent/batching/road.py"}
    askers = {module for module, receivers in calls("answer").items() if "self.batches" in receivers}
    assert askers == {SEAM}
    source = (ROOT / SEAM).read_text(encoding="utf-8")
    batched = source[source.index("async def _batched(") :]
    assert batched.index("gate.admit(") < batched.index("batches.answer(") < batched.index("self._finish(")
