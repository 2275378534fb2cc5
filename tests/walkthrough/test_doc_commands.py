"""How the walkthrough's commands are read from a doc: marked blocks only, continuations, notes, sample output."""

from __future__ import annotations

from pathlib import Path

from tests.walkthrough.doc_commands import walkthrough_commands

DOC = """# A doc

```sh
kubectl delete ts --all -A            # not marked: never run
```

<!-- walkthrough -->
```sh
helm install shiftlight charts/shiftlight -n shiftlight \\
  --set operator.backend=simulator
kubectl get ts -n ml -w               # Ctrl-C once it's waiting
# NAME       PHASE              ACTIVE
# llama-8b   AwaitingApproval   stock
kubectl auth can-i approve configrollouts.shiftlight.dev -n ml   # yes
```

Some prose.

<!-- walkthrough -->

```console
$ kubectl shift abort llama-8b -n ml
error: nothing to abort: no rollout in progress (phase Observing)
$ shiftctl history llama-8b -n ml --reason "two # words"
```
"""


def test_marked_blocks_give_their_commands_in_order_with_notes_and_sample_output(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    commands = walkthrough_commands([doc], tmp_path)
    assert [c.argv[:3] for c in commands] == [
        ("helm", "install", "shiftlight"),
        ("kubectl", "get", "ts"),
        ("kubectl", "auth", "can-i"),
        ("kubectl", "shift", "abort"),
        ("shiftctl", "history", "llama-8b"),
    ]
    helm, watch, can_i, abort, history = commands
    assert helm.argv[-2:] == ("--set", "operator.backend=simulator") and helm.line == 9
    assert watch.note == "Ctrl-C once it's waiting"
    assert watch.sample[-1].split()[:2] == ["llama-8b", "AwaitingApproval"]
    assert can_i.note == "yes" and can_i.sample == ()
    assert abort.sample == ("error: nothing to abort: no rollout in progress (phase Observing)",)
    assert history.argv[-2:] == ("--reason", "two # words") and history.note == ""
