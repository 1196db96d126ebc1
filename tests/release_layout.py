"""A small Adaptive-RAG release folder written the way the AdaRAGUE release lays its files out
(`predictions/<split>/{nor,oner,ircot}_qa_<llm>_<dataset>____*`), for loader and label tests."""

from __future__ import annotations

import json
from pathlib import Path

PREFIX_TAG = {"nor": ["zero"], "oner": ["single", "15"], "ircot": ["multi", "6"]}
SETTINGS = {
    "nor": "prompt_set_1",
    "oner": "prompt_set_1___bm25_retrieval_count__15___distractor_count__1",
    "ircot": "prompt_set_1___bm25_retrieval_count__6___distractor_count__1",
}
# dataset -> [(id, question, gold, {prefix: (prediction, correct)})]
QUESTIONS = {
    "nq": [
        ("single_nq_dev_1", "who wrote hamlet", ["William Shakespeare"],
         {"nor": ("William Shakespeare", 1), "oner": ("Shakespeare", 0), "ircot": ("W. S.", 0)}),
        ("single_nq_dev_2", "when did the zorblat war end", ["1999"],
         {"nor": ("1987", 0), "oner": ("1999", 1), "ircot": ("1999", 1)}),
        ("single_nq_dev_3", "who is the king of nowhere", ["Quen Vik"],
         {"nor": ("nobody", 0), "oner": ("a king", 0), "ircot": ("unknown", 0)}),
    ],
    "musique": [
        ("2hop__1_2", "Who founded the company that made the\nfirst zorblat?", ["Ada Lovelace"],
         {"nor": ("Bob", 0), "oner": ("Carol", 0), "ircot": ("Ada Lovelace", 1)}),
        ("2hop__3_4", "Where was the author of Zorblat born?", ["Oslo"],
         {"nor": ("Bergen", 0), "oner": ("Trondheim", 0), "ircot": ("Stavanger", 0)}),
    ],
}  # fmt: skip


def write_release(
    root: Path,
    split: str = "dev_500",
    llm: str = "my_llm_7b",
    questions: dict | None = None,
    skip: tuple[str, str] | None = None,
) -> Path:
    """Writes the layout under root/predictions/<split>/ and returns root. `skip` =
    (prefix, dataset) leaves that strategy folder out."""
    split_dir = root / "predictions" / split
    for dataset, rows in (questions or QUESTIONS).items():
        stem = f"{dataset}_to_{dataset}__{split}_subsampled"
        for prefix, tag in PREFIX_TAG.items():
            if skip == (prefix, dataset):
                continue
            folder = split_dir / f"{prefix}_qa_{llm}_{dataset}____{SETTINGS[prefix]}"
            folder.mkdir(parents=True)
            preds = {qid: out[prefix][0] for qid, _, _, out in rows}
            right = {qid: tag for qid, _, _, out in rows if out[prefix][1]}
            gold = {qid: g for qid, _, g, _ in rows}
            _json(folder / f"prediction__{stem}.json", preds)
            _json(folder / f"ground_truth__{stem}.json", gold)
            _json(folder / f"zero_single_multi_classification__{stem}.json", right)
            _json(folder / f"evaluation_metrics__{stem}.json", {"em": 0.0, "count": len(rows)})
            (folder / f"prediction__{stem}_time_taken.txt").write_text("12")
            if prefix == "nor":
                chains = "".join(
                    f'\n{qid}\n{text}\nQ: {text.replace(chr(10), " ")}\nA: "{out["nor"][0]}"\n'
                    f"A: {out['nor'][0]}\nQ: [EOQ]\nS: 0.0\n"
                    for qid, text, _, out in rows
                )
                (folder / f"prediction__{stem}_chains.txt").write_text(chains)
    return root


def folder_of(root: Path, prefix: str, dataset: str, split: str = "dev_500") -> Path:
    return next((root / "predictions" / split).glob(f"{prefix}_qa_*_{dataset}____*"))


def _json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=4))
