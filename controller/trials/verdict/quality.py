"""Quality gate for lossy knobs: does the candidate still produce what the baseline produces?

The same fixed prompt set is run greedy (``temperature=0``, ``logprobs=1``) on a baseline endpoint and on the
candidate. Two numbers come out:

- **exact-match rate**: share of prompts whose generated token ids are identical;
- **mean log-prob divergence**: per prompt, the mean absolute difference of the chosen tokens' log-probs over the
  positions where both sequences still agree plus the first position where they differ, averaged over prompts.

The candidate passes when ``exact_match_rate >= min_exact_match`` and ``divergence <= max_logprob_divergence``
(thresholds come from the policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from controller import http_bounded
from controller.domain.scrub import strip_userinfo
from controller.domain.trial import QualityReport
from controller.errors import InvalidInput, TemporaryError
from controller.policy import Policy

#: One completion's whole deadline (connect, headers, body): a greedy completion of a few tokens takes seconds.
GENERATE_DEADLINE_S = 120.0
#: The longest completion answer read (a few tokens with their log-probs are a few kilobytes).
MAX_ANSWER_BYTES = 1024 * 1024


class _Logprobs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    token_logprobs: list[float | None]
    tokens: list[str]


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    token_ids: list[int] | None = None
    logprobs: _Logprobs | None = None


class _Completion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    choices: list[_Choice]


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int | str, ...]  # token ids, or token strings when the server does not return ids
    logprobs: tuple[float, ...]


def fixed_prompts(
    count: int = 16, length: int = 24, *, seed: int = 1234, token_id_range: tuple[int, int] = (300, 4000)
) -> list[list[int]]:
    """A reproducible prompt set of token ids (the same on every call with the same arguments)."""
    rng = np.random.default_rng(seed)
    low, high = token_id_range
    return [[int(x) for x in rng.integers(low, high, length)] for _ in range(count)]


def generate(
    endpoint: str,
    model: str,
    prompt: Sequence[int] | str,
    *,
    max_tokens: int,
    deadline_s: float = GENERATE_DEADLINE_S,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Generation:
    """One greedy completion, read within ``deadline_s`` in all and ``max_bytes``; a failed read is a
    :class:`TemporaryError` naming the HTTP status or the kind of failure, a malformed answer :class:`InvalidInput`
    (neither quotes the answer)."""
    url = endpoint.rstrip("/") + "/v1/completions"
    shown = strip_userinfo(url)
    body = {
        "model": model,
        "prompt": list(prompt) if not isinstance(prompt, str) else prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "ignore_eos": True,
        "return_token_ids": True,
        "seed": 0,
    }
    try:
        answer = http_bounded.request(
            "POST", url, limits=http_bounded.Limits(deadline_s, max_bytes=max_bytes), json_body=body
        )
        if answer.status != 200:
            raise http_bounded.ReadFailed("http-status", status=answer.status)
        data = answer.json()
    except http_bounded.ReadFailed as exc:
        if exc.kind in ("malformed", "too-deep"):
            raise InvalidInput(
                f"unexpected completion answer: {exc.describe()}", source=shown, field="choices[0]"
            ) from None
        raise TemporaryError(f"quality gate: {shown}: {exc.describe()}", delay_s=10) from None
    try:
        choice = _Completion.model_validate(data).choices[0]
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise InvalidInput(f"unexpected completion answer at {where}", source=shown, field="choices[0]") from None
    except IndexError:
        raise InvalidInput("the completion answer has no choice", source=shown, field="choices[0]") from None
    lps = tuple(float(x) if x is not None else 0.0 for x in (choice.logprobs.token_logprobs if choice.logprobs else []))
    ids: tuple[int | str, ...] = (
        tuple(choice.token_ids)
        if choice.token_ids is not None
        else tuple(choice.logprobs.tokens if choice.logprobs else [])
    )
    return Generation(token_ids=ids, logprobs=lps)


def compare(baseline: Sequence[Generation], candidate: Sequence[Generation]) -> tuple[float, float]:
    """(exact-match rate, mean log-prob divergence) of two runs of the same prompt set."""
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("baseline and candidate must cover the same non-empty prompt set")
    matches = 0
    divergences: list[float] = []
    for b, c in zip(baseline, candidate, strict=True):
        if b.token_ids == c.token_ids:
            matches += 1
        agree = 0
        for x, y in zip(b.token_ids, c.token_ids, strict=False):
            if x != y:
                break
            agree += 1
        upto = min(agree + 1, len(b.logprobs), len(c.logprobs))
        if upto:
            divergences.append(float(np.mean(np.abs(np.subtract(b.logprobs[:upto], c.logprobs[:upto])))))
    return matches / len(baseline), float(np.mean(divergences)) if divergences else 0.0


class QualityGate:
    """Compares a candidate endpoint against a baseline endpoint on a fixed prompt set."""

    def __init__(
        self,
        baseline_endpoint: str,
        baseline_model: str,
        *,
        prompts: Sequence[Sequence[int] | str] | None = None,
        max_tokens: int = 16,
        min_exact_match: float = 0.9,
        max_logprob_divergence: float = 0.05,
    ) -> None:
        self.baseline_endpoint = baseline_endpoint
        self.baseline_model = baseline_model
        self.prompts: list[Sequence[int] | str] = list(prompts) if prompts is not None else list(fixed_prompts())
        if not self.prompts:
            raise InvalidInput("the quality gate needs at least one prompt", field="prompts")
        self.max_tokens = max_tokens
        self.min_exact_match = min_exact_match
        self.max_logprob_divergence = max_logprob_divergence
        self._baseline: list[Generation] | None = None

    def _run(self, endpoint: str, model: str) -> list[Generation]:
        return [generate(endpoint, model, p, max_tokens=self.max_tokens) for p in self.prompts]

    def baseline(self) -> list[Generation]:
        """The baseline's generations (computed once, then reused for every candidate)."""
        if self._baseline is None:
            self._baseline = self._run(self.baseline_endpoint, self.baseline_model)
        return self._baseline

    def evaluate(self, endpoint: str, model: str) -> QualityReport:
        base = self.baseline()
        cand = self._run(endpoint, model)
        exact, div = compare(base, cand)
        problems = []
        if exact < self.min_exact_match:
            problems.append(f"exact match {exact:.0%} < {self.min_exact_match:.0%}")
        if div > self.max_logprob_divergence:
            problems.append(f"log-prob divergence {div:.4f} > {self.max_logprob_divergence:.4f}")
        return QualityReport(
            exact_match_rate=exact,
            mean_logprob_divergence=div,
            prompts=len(self.prompts),
            passed=not problems,
            reason="; ".join(problems),
        )


def quality_gate_for(policy: Policy, baseline_endpoint: str, baseline_model: str) -> QualityGate:
    """The quality gate the policy asks for (``quality_gate``: the prompt count and both thresholds), comparing a
    candidate with the stable variant at ``baseline_endpoint``."""
    gate = policy.quality_gate
    return QualityGate(
        baseline_endpoint,
        baseline_model,
        prompts=fixed_prompts(count=gate.prompts),
        min_exact_match=gate.min_exact_match,
        max_logprob_divergence=gate.max_logprob_divergence,
    )
