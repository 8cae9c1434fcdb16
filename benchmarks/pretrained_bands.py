"""The multi-label pretrained model against its TF-IDF baseline, per label-frequency band.

    python benchmarks/pretrained_bands.py [--write-docs]

Rebuilds bilstm_labelwise.wordnet's split from its weights' metadata, trains the TF-IDF (word 1-2 grams)
+ one-vs-rest linear SVM baseline on the same training split, and compares per-label F1 on the test
split in three bands of the labels' training frequency (the most frequent third, the middle, the rarest
third), with micro-F1, macro-F1 and P@k overall. The model decides at the threshold tuned on validation
(stored with its weights). Prints a table and writes benchmarks/results/pretrained_bands.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, machine_line, markdown_table, update_doc_section, write_json  # noqa: E402

import attnzoo  # noqa: E402
from attnzoo.train.metrics import multilabel_f1, precision_at_k  # noqa: E402
from attnzoo.train.tasks import build_task  # noqa: E402

NAME = "bilstm_labelwise.wordnet"


def per_label_f1(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    tp = (predicted & target).sum(0).double()
    fp = (predicted & ~target).sum(0).double()
    fn = (~predicted & target).sum(0).double()
    return 2 * tp / (2 * tp + fp + fn).clamp(min=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)

    model = attnzoo.create(NAME, pretrained=True).eval()
    meta = model.attnzoo_metadata
    task = build_task(meta["task_config"], metadata=meta)
    test = task.splits["test"]
    target = task._targets(test).bool()
    probs = torch.sigmoid(task._logits(model, test, 512))
    ours = probs >= task.threshold

    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import MultiLabelBinarizer
    from sklearn.svm import LinearSVC

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform([task.texts[i] for i in task.splits["train"]])
    x_test = vectorizer.transform([task.texts[i] for i in test])
    labels = list(range(len(task.label_names)))
    y_train = MultiLabelBinarizer(classes=labels).fit_transform([task.labels[i] for i in task.splits["train"]])
    svm = OneVsRestClassifier(LinearSVC(C=1.0), n_jobs=1).fit(x_train, y_train)
    theirs = torch.from_numpy(svm.predict(x_test)).bool()
    scores = torch.from_numpy(svm.decision_function(x_test)).float()

    frequency = torch.tensor(y_train.sum(0), dtype=torch.float64)
    order = frequency.argsort(descending=True)
    third = len(labels) // 3
    bands = {
        "frequent (top third)": order[:third],
        "middle third": order[third : 2 * third],
        "rare (bottom third)": order[2 * third :],
    }
    f1_ours, f1_theirs = per_label_f1(ours, target), per_label_f1(theirs, target)
    rows, results = [], {"machine": machine_line(), "model": NAME, "threshold": task.threshold, "bands": {}}
    for band, index in bands.items():
        train_counts = frequency[index]
        entry = {
            "labels": len(index),
            "train_examples_per_label": [int(train_counts.min()), int(train_counts.max())],
            "macro_f1_model": float(f1_ours[index].mean()),
            "macro_f1_baseline": float(f1_theirs[index].mean()),
        }
        results["bands"][band] = entry
        rows.append(
            [
                band,
                f"{entry['train_examples_per_label'][0]:,}-{entry['train_examples_per_label'][1]:,}",
                f"{entry['macro_f1_model']:.3f}",
                f"{entry['macro_f1_baseline']:.3f}",
                f"{entry['macro_f1_model'] - entry['macro_f1_baseline']:+.3f}",
            ]
        )
    overall = {
        "model": {
            **multilabel_f1(ours, target),
            "precision_at_1": precision_at_k(probs, target, 1),
            "precision_at_5": precision_at_k(probs, target, 5),
        },
        "baseline": {
            **multilabel_f1(theirs, target),
            "precision_at_1": precision_at_k(scores, target, 1),
            "precision_at_5": precision_at_k(scores, target, 5),
        },
    }
    results["overall"] = overall
    for who in ("model", "baseline"):
        o = overall[who]
        rows.append(
            [
                f"all labels ({who})",
                "",
                f"micro {o['micro_f1']:.3f}",
                f"macro {o['macro_f1']:.3f}",
                f"P@1 {o['precision_at_1']:.3f}, P@5 {o['precision_at_5']:.3f}",
            ]
        )
    table = markdown_table(
        ["band", "training examples per label", "macro-F1 model", "macro-F1 TF-IDF+SVM", "difference"], rows
    )
    print(table)
    write_json(HERE / "results" / "pretrained_bands.json", results)
    if args.write_docs:
        text = (
            f"Measured with `python benchmarks/pretrained_bands.py --write-docs` on the {len(test):,} test "
            f"glosses of `{NAME}` (model at its validation-tuned threshold {task.threshold:.2f}; baseline "
            f"TF-IDF word 1-2 grams + one-vs-rest linear SVM on the same training split; P@k of the "
            f"baseline ranks by its decision values).\n\n" + table
        )
        update_doc_section(ROOT / "docs" / "pretrained-quality.md", "bands", text)


if __name__ == "__main__":
    main()
