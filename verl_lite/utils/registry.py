"""One name → object registry, reused by every extension point in verl_lite.

Estimators, losses, dispatch modes, rollout backends, engines, checkpoint-sync backends, reward
managers and trainer modes each own a ``Registry`` instance; this module is the only place where
registration rules live.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of objects filled by a ``register(name)`` decorator.

    Registering the same object twice under one name is harmless (a module imported twice);
    registering a *different* object under a taken name raises, so two extensions can never
    silently shadow each other. ``get`` on an unknown name lists the known ones.

    Example::

        POLICY_LOSSES = Registry("policy_loss")

        @POLICY_LOSSES.register("vanilla")
        def compute_policy_loss_vanilla(...): ...

        fn = POLICY_LOSSES.get("vanilla")
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Return a decorator that stores its argument under ``name`` and returns it unchanged."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} registry: name must be a non-empty string, got {name!r}.")

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        """Store ``obj`` under ``name`` (the non-decorator form of ``register``)."""
        existing = self._entries.get(name)
        if existing is not None and existing is not obj and not _same_definition(existing, obj):
            raise ValueError(
                f"{self.kind} {name!r} is already registered to {_describe(existing)}; "
                f"choose another name for {_describe(obj)}."
            )
        self._entries[name] = obj

    def get(self, name: str) -> T:
        """Return the object registered under ``name``; the error lists every known name."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries)) or '(none)'}."
            ) from None

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"


def _same_definition(a: object, b: object) -> bool:
    """True when ``a`` and ``b`` are the same source definition loaded twice (e.g. module reloaded)."""
    qa, qb = getattr(a, "__qualname__", None), getattr(b, "__qualname__", None)
    ma, mb = getattr(a, "__module__", None), getattr(b, "__module__", None)
    return qa is not None and qa == qb and ma == mb and ma != "__main__"


def _describe(obj: object) -> str:
    module = getattr(obj, "__module__", type(obj).__module__)
    name = getattr(obj, "__qualname__", type(obj).__qualname__)
    return f"{module}.{name}"
