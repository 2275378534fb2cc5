"""The cross-field checks of the CR models (and of the domain models a spec embeds) as Kubernetes CEL rules, so
the apiserver refuses what the parser refuses (see :data:`CEL_RULES`)."""

from __future__ import annotations

from pydantic import (
    BaseModel,
)

from controller.crd.config_rollout import (
    ConfigRolloutSpec,
)
from controller.crd.shared import (
    Toleration,
)
from controller.crd.trial import (
    TrialSpec,
)
from controller.crd.tuned_service import (
    PolicyRef,
    ReplicaBounds,
    TunedServiceSpec,
    WorkloadRef,
)
from controller.domain.config import CPU_DRAFTERS

# ----- CEL rules ----------------------------------------------------------------------------------------
#
# The cross-field checks of the validators above (and of the domain models a spec embeds) as Kubernetes CEL
# rules, so the apiserver refuses what the parser refuses. ``controller.crd.schema`` puts each model's rules
# under ``x-kubernetes-validations`` where the model's schema sits. In Kubernetes CEL a field set to null is
# absent for ``has()``, and a defaulted field is always present; the rules read the model's default when a
# field is absent, so they hold with or without the apiserver's defaulting.


def _or(path: str, default: str) -> str:
    """``path``'s value, or ``default`` when the field is absent (``path`` is ``self.a.b``)."""
    return f"(has({path}) ? {path} : {default})"


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _engine_config_rules(at: str) -> list[dict[str, str]]:
    """EngineConfig's ``_consistent`` checks for the config at ``at`` (e.g. ``self.config``)."""
    method = _or(f"{at}.speculative_method", "'none'")
    k = _or(f"{at}.num_speculative_tokens", "0")
    rounding = _or(f"{at}.mamba_cache_stochastic_rounding", "false")
    dtype = _or(f"{at}.mamba_ssm_cache_dtype", "'auto'")
    async_on = _or(f"{at}.async_scheduling", "false")
    cpu = ", ".join(f"'{m}'" for m in sorted(CPU_DRAFTERS))
    name = at.removeprefix("self.")
    return [
        _rule(
            f"{method} != 'none' || {k} == 0",
            f"{name}: num_speculative_tokens must be 0 when speculative_method is 'none'",
        ),
        _rule(
            f"{method} == 'none' || {k} >= 1", f"{name}: num_speculative_tokens must be >= 1 with a speculative method"
        ),
        _rule(
            f"!has({at}.prompt_lookup_max) || {method} == 'ngram'",
            f"{name}: prompt_lookup_max only applies to speculative_method 'ngram'",
        ),
        _rule(
            f"!{rounding} || {dtype} == 'float16'",
            f"{name}: mamba_cache_stochastic_rounding requires mamba_ssm_cache_dtype 'float16'",
        ),
        _rule(
            f"!has({at}.mamba_cache_philox_rounds) || {rounding}",
            f"{name}: mamba_cache_philox_rounds requires mamba_cache_stochastic_rounding",
        ),
        _rule(
            f"!{async_on} || !({method} in [{cpu}])",
            f"{name}: async_scheduling cannot be enabled with a CPU drafter ({cpu})",
        ),
    ]


def _length_rules(at: str) -> list[dict[str, str]]:
    """LengthDistribution's ``_cap_above_mean`` for the distribution at ``at``."""
    return [
        _rule(
            f"!has({at}.maximum) || double({at}.maximum) >= double({at}.mean)",
            f"{at.removeprefix('self.')}: maximum must be >= mean",
        )
    ]


def _unique(path: str, item: str = "") -> str:
    """Every member of the list at ``path`` (or its ``item`` field) occurs once."""
    a, b = (f"x.{item}", f"y.{item}") if item else ("x", "y")
    return f"{path}.all(x, {path}.exists_one(y, {b} == {a}))"


#: model -> the CEL rules its schema carries (``self`` is that model's object).
CEL_RULES: dict[type[BaseModel], list[dict[str, str]]] = {
    Toleration: [
        _rule(
            _or("self.operator", "'Equal'") + " != 'Exists' || !has(self.value) || self.value == ''",
            "a toleration with operator 'Exists' must not set a value",
        )
    ],
    WorkloadRef: [_rule(_unique("self.deployments"), "deployment names must be unique")],
    PolicyRef: [_rule("!(has(self.preset) && has(self.configMapRef))", "set either preset or configMapRef, not both")],
    ReplicaBounds: [
        _rule(f"{_or('self.minReplicas', '1')} <= {_or('self.maxReplicas', '8')}", "minReplicas must be <= maxReplicas")
    ],
    TunedServiceSpec: [
        _rule(f"!has(self.schedule) || {_unique('self.schedule', 'name')}", "schedule window names must be unique")
    ],
    TrialSpec: [
        *_engine_config_rules("self.config"),
        *_length_rules("self.shape.prompt_tokens"),
        *_length_rules("self.shape.output_tokens"),
    ],
    ConfigRolloutSpec: [
        _rule("self.steps.all(w, w >= 1 && w <= 100)", "every step weight must be in 1..100"),
        _rule(f"self.steps.isSorted() && {_unique('self.steps')}", "step weights must rise strictly"),
        _rule("self.steps[self.steps.size() - 1] == 100", "the last step weight must be 100"),
        *_engine_config_rules("self.fromConfig"),
        *_engine_config_rules("self.toConfig"),
    ],
}


__all__ = ["CEL_RULES"]
