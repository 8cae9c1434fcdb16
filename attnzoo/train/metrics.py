"""Metrics, written out plainly: micro/macro F1 for multi-label and single-label classification,
accuracy, and word accuracy / phoneme error rate for grapheme-to-phoneme.

Each is a function of counts (``*_counts``: true and false positives per label, words right, edits), so
that processes scoring their own rows add their counts (``all_sum``) and get the scores of all rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "multilabel_f1",
    "multilabel_counts",
    "f1_from_counts",
    "precision_sum",
    "single_label_counts",
    "single_label_from_counts",
    "g2p_counts",
    "g2p_from_counts",
    "precision_at_k",
    "accuracy",
    "macro_f1_single",
    "edit_distance",
    "g2p_scores",
    "g2p_scores_both",
    "without_stress",
    "better",
]


def better(task: object, score: float, best: float | None, *, ties: bool = False) -> bool:
    """Whether ``score`` of the task's main metric beats ``best`` (None: nothing yet), the way the metric
    goes (the task's ``lower_is_better``: a loss); ``ties``: whether an equal score counts."""
    if best is None or (ties and score == best):
        return True
    return score < best if getattr(task, "lower_is_better", False) else score > best


def multilabel_counts(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """predicted, target: bool [N, L] -> float64 [3, L]: true positives, false positives and false
    negatives of each label."""
    predicted, target = predicted.bool(), target.bool()
    return torch.stack(
        [(predicted & target).sum(0), (predicted & ~target).sum(0), (~predicted & target).sum(0)]
    ).double()


def f1_from_counts(counts: torch.Tensor) -> dict[str, float]:
    """Micro-F1 pools every decision, 2·TP / (2·TP + FP + FN); macro-F1 averages the labels that occur in
    the target or the predictions (an absent, never-predicted label is not counted). counts: [3, L]."""
    tp, fp, fn = counts
    pooled = tp.sum() + fp.sum() + fn.sum()
    micro = (2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())).item() if pooled else 0.0
    present = (tp + fp + fn) > 0
    per_label = torch.where(present, 2 * tp / (2 * tp + fp + fn).clamp(min=1), torch.zeros_like(tp))
    macro = per_label[present].mean().item() if present.any() else 0.0
    return {"micro_f1": micro, "macro_f1": macro}


def single_label_counts(predicted: torch.Tensor, target: torch.Tensor, classes: int) -> torch.Tensor:
    """predicted, target: class ids [N] -> float64 [3 * classes + 2]: each class's true positives, false
    positives and false negatives, then the rows right and the rows."""
    one_hot = [torch.nn.functional.one_hot(t, classes).bool() for t in (predicted, target)]
    right = torch.tensor([(predicted == target).sum().item(), len(target)], dtype=torch.float64)
    return torch.cat([multilabel_counts(*one_hot).flatten(), right])


def single_label_from_counts(counts: torch.Tensor) -> dict[str, float]:
    """Accuracy (rows right / rows) and macro-F1 from :func:`single_label_counts`, added over passes or
    processes."""
    right, rows = counts[-2:].tolist()
    macro = f1_from_counts(counts[:-2].view(3, -1))["macro_f1"]
    return {"accuracy": right / rows if rows else 0.0, "macro_f1": macro}


def multilabel_f1(predicted: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """predicted, target: bool [N, L]: :func:`f1_from_counts` of their counts."""
    return f1_from_counts(multilabel_counts(predicted, target))


def precision_sum(scores: torch.Tensor, target: torch.Tensor, k: int) -> float:
    """scores [N, L], target bool [N, L]: the sum over texts of (true labels among the k best scored) / k."""
    k = min(k, scores.shape[1])
    if scores.shape[0] == 0 or k == 0:
        return 0.0
    best = scores.topk(k, dim=1).indices
    return target.gather(1, best).double().sum(1).div(k).sum().item()


def precision_at_k(scores: torch.Tensor, target: torch.Tensor, k: int) -> float:
    """scores [N, L], target bool [N, L]: the mean over texts of (true labels among the k best scored) / k.
    A text without a gold label counts 0 (docs/training.md, "Metrics")."""
    return precision_sum(scores, target, k) / scores.shape[0] if scores.shape[0] else 0.0


def accuracy(predicted: torch.Tensor, target: torch.Tensor) -> float:
    return (predicted == target).double().mean().item()


def macro_f1_single(predicted: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    one_hot_p = torch.nn.functional.one_hot(predicted, num_classes).bool()
    one_hot_t = torch.nn.functional.one_hot(target, num_classes).bool()
    return multilabel_f1(one_hot_p, one_hot_t)["macro_f1"]


def edit_distance(a: Sequence, b: Sequence) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def g2p_counts(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> torch.Tensor:
    """float64 [4]: words right (the prediction equals one of the word's pronunciations), edits to the
    closest pronunciation, that pronunciation's length, words."""
    correct, errors, length = 0, 0, 0
    for pred, refs in zip(predictions, references, strict=True):
        best = min(refs, key=lambda r: edit_distance(pred, r))
        distance = edit_distance(pred, best)
        correct += distance == 0
        errors += distance
        length += len(best)
    return torch.tensor([correct, errors, length, len(predictions)], dtype=torch.float64)


def g2p_from_counts(counts: torch.Tensor) -> dict[str, float]:
    """Word accuracy and phoneme error rate (edits over the closest pronunciations' length, pooled)."""
    correct, errors, length, words = counts.tolist()
    return {"word_accuracy": correct / max(words, 1), "phoneme_error_rate": errors / max(length, 1)}


def g2p_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]) -> dict[str, float]:
    """Word accuracy (the prediction equals one of the word's pronunciations) and phoneme error rate
    (edit distance to the closest pronunciation over that pronunciation's length, pooled)."""
    return g2p_from_counts(g2p_counts(predictions, references))


def without_stress(phonemes: Sequence[str]) -> list[str]:
    """ARPAbet without lexical stress (AE1 -> AE): the 39-phoneme set most published G2P figures use."""
    return [p.rstrip("012") for p in phonemes]


def g2p_scores_both(
    predictions: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
) -> dict[str, float]:
    """:func:`g2p_scores` with stress, and again with stress removed from both sides (``stress_free_*``)."""
    plain = g2p_scores(
        [without_stress(p) for p in predictions], [[without_stress(r) for r in refs] for refs in references]
    )
    return {**g2p_scores(predictions, references), **{f"stress_free_{k}": v for k, v in plain.items()}}
