"""The strategy registry (issue 36): specs in YAML, checked; a fourth strategy through the loop,
the labelling run, the oracles, the service's accounting and a router's calibration; the
default prior of a source without one; and no module outside the registry naming a strategy."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import ConfigError, InputError
from retrieval_gate.gates.base import as_questions
from retrieval_gate.labels.strategy_labels import LearnedPrior, read_strategy_labels
from retrieval_gate.pricing import Calibration
from retrieval_gate.questions import Question
from retrieval_gate.rag.decisions import FixedStrategy, check_router
from retrieval_gate.rag.loop import AdaptiveRAG
from retrieval_gate.rag.modes import ModeOptions, check_modes, known_modes, oracle_from_run
from retrieval_gate.retrieval import BM25Retriever
from retrieval_gate.retrieval.base import Hit
from retrieval_gate.strategies import (
    BUILTIN,
    DEFAULT_COSTS,
    StrategyRegistry,
    load_strategies,
    resolve_strategies,
    specs_of,
)
from routers import DOCS, ScriptedGenerator

ROOT = Path(__file__).resolve().parents[1]
FOUR = ROOT / "configs" / "strategies" / "four.yaml"
NAMES = ("no_retrieval", "bm25_top3", "one_retrieval", "multi_step")


def q(i: int, text: str, answers=("x",), source: str = "test") -> Question:
    return Question(id=f"q{i}", text=text, answers=answers, source=source)


class Recording:
    """A stand-in BM25 retriever: the first k documents for every query, each batched call's
    size and k recorded."""

    name = "bm25"

    def __init__(self):
        self.calls = []

    def retrieve(self, questions, k=5):
        self.calls.append((len(questions), k))
        return [[Hit(d, 1.0 / (i + 1)) for i, d in enumerate(DOCS[:k])] for _ in questions]


class FourRouter:
    """Routes question i (by its id's number) to strategy i % 4 of the four."""

    name, threshold, checksum = "four-router", 0.5, "four-router-v1"

    def __init__(self, registry: StrategyRegistry | None = None):
        self.strategies = NAMES
        self.registry = registry

    def route(self, questions, budget=None):
        def number(x):  # "question 2" (a bare string), else the id's number ("q2")
            last = x.text.split()[-1]
            return int(last) if last.isdigit() else int(x.id[1:])

        return [NAMES[number(x) % 4] for x in as_questions(questions)]

    def strategy_proba(self, questions):
        return np.full((len(questions), 4), 0.25)

    def scores(self, questions):
        return np.full(len(questions), 0.5)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "strategies.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the registry and its YAML


def test_builtins_keep_their_names_costs_and_behaviour():
    assert BUILTIN.names == ("no_retrieval", "one_retrieval", "multi_step")
    assert DEFAULT_COSTS == {"no_retrieval": 0.0, "one_retrieval": 1.0, "multi_step": 3.35}
    none, one, multi = BUILTIN.specs
    assert (none.retrieves, one.retrieves, multi.retrieves) == (False, True, True)
    assert (none.multi_step, one.multi_step, multi.multi_step) == (False, False, True)
    assert [s.prompt for s in BUILTIN] == ["closed-book", "with-context", "ircot"]
    assert (none.llm_calls, one.llm_calls, multi.llm_calls) == (1.0, 1.0, None)
    assert BUILTIN.binary_pair() == ("no_retrieval", "one_retrieval")


def test_the_shipped_four_strategy_file():
    reg = load_strategies(FOUR)
    assert reg.names == NAMES and reg.costs(NAMES) == (0.0, 0.6, 1.0, 3.35)
    top3 = reg["bm25_top3"]
    assert (top3.retriever, top3.k, top3.multi_step, top3.prompt) == ("bm25", 3, False,
                                                                      "with-context")  # fmt: skip
    assert reg["one_retrieval"] == BUILTIN["one_retrieval"]  # a built-in's name alone reuses it
    assert reg.binary_pair() == ("no_retrieval", "one_retrieval")  # not the cheaper bm25_top3
    assert resolve_strategies([str(FOUR)]) == reg
    assert resolve_strategies(["no_retrieval,multi_step"]).names == ("no_retrieval", "multi_step")


def test_yaml_forms_of_steps_and_a_builtin_name_with_keys(tmp_path):
    reg = load_strategies(
        write(
            tmp_path,
            """
strategies:
  - {name: no_retrieval}
  - {name: dense_multi, cost: 2, retriever: dense, steps: multi, max_steps: 3}
  - {name: multi_step, cost: 5, retriever: default, steps: 4}
""",
        )
    )
    assert reg["dense_multi"].multi_step and reg["dense_multi"].max_steps == 3
    assert reg["multi_step"].cost == 5 and reg["multi_step"].max_steps == 4
    assert reg["dense_multi"].to_dict()["steps"] == "multi"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("strategies:\n  - {name: a, cost: 0}\n  - {name: a, cost: 1}\n",
         "strategies[1]: duplicate name 'a'"),
        ("strategies:\n  - {name: a, cost: 0, retriever: web}\n",
         "strategies[0] (a).retriever: unknown retriever 'web'"),
        ("strategies:\n  - {name: a, cost: -1}\n", "strategies[0] (a).cost: -1 is negative"),
        ("strategies:\n  - {name: a, cost: cheap}\n",
         "strategies[0] (a).cost: 'cheap' is not a number"),
        ("strategies:\n  - {name: a, cost: 1, retriever: bm25, steps: 0}\n",
         "strategies[0] (a).steps: 0 is below 1"),
        ("strategies:\n  - {name: a, cost: 1, colour: red}\n",
         "strategies[0]: unknown key 'colour'"),
        ("strategies: []\n", "strategies: a non-empty list"),
        ("strategies:\n  - {cost: 1}\n", "strategies[0]: missing name:"),
        ("strategies:\n  - {name: yes, cost: 1}\n", "line 2: strategies[0].name: YAML 1.1 "
         "reads yes as a boolean (True); quote it as written (name: 'yes')"),
        ("strategies:\n  - {name: on, cost: 1}\n", "reads on as a boolean (True); quote it as "
         "written (name: 'on')"),
        # Octal and hex were read silently (k: 010 ran 8 passages); a name is quoted as written
        ("strategies:\n  - {name: a, cost: 1, retriever: bm25, k: 010}\n",
         "strategies[0].k: YAML 1.1 reads 010 as an octal number (8); write it in decimal "
         "(e.g. 10), or quote it if it is text"),
        ("strategies:\n  - {name: a, cost: 0x10}\n", "reads 0x10 as a hex number (16)"),
        ("strategies:\n  - {name: 010, cost: 1}\n", "strategies[0].name: YAML 1.1 reads 010 "
         "as an octal number (8); quote it as written (name: '010')"),
        ("strategies:\n  - {name: a, cost: 1, description: off}\n",
         "quote it as written (description: 'off')"),
        ("strategies:\n  - {name: 7, cost: 1}\n", "strategies[0]: name 7 is read by YAML as a "
         "number, not text: quote it as written (name: \"7\")"),
        ("strategies:\n  - {name: [a], cost: 1}\n", "name ['a'] is not text"),
        ("strategies:\n  - {name: 'a,b', cost: 1}\n", "strategies[0]: name 'a,b' is not a plain"),
        ("strategies:\n  - {name: 'top k=3', cost: 1}\n", "name 'top k=3' is not a plain name"),
        ("strategies:\n  - {name: '-x', cost: 1}\n", "name '-x' is not a plain name"),
        ("strategies:\n  - {name: a}\n", "strategies[0] (a): missing cost:"),
        ("strategies:\n  - {name: a, cost: 2}\n  - {name: b, cost: 1}\n",
         "list strategies in cost order"),
        ("strategies:\n  - {name: a, cost: 1, k: 3}\n", "without a retriever it takes no k"),
        ("strategies:\n  - {name: a, cost: 1, retriever: bm25, prompt: closed-book}\n",
         "does not fit what it runs"),
        ("other: 1\n", "top-level strategies: list"),
        ("strategies: [\n", "not valid YAML"),
        ("strategies:\n  - {name: a, cost: 1, retriever: default, steps: multi, max_steps: 50}\n",
         "strategies[0] (a).max_steps: 50 is past 10"),
        ("strategies:\n  - {name: a, cost: 1, retriever: default, steps: 11}\n",
         "strategies[0] (a).steps: 11 is past 10"),
        ("strategies:\n  - {name: a, cost: 1e3}\n", "strategies[0] (a).cost: '1e3' is read by "
         "YAML as text, not a number: write it as 1000 or 1.0e+3"),
        ("strategies:\n  - {name: a, cost: 2.5e3}\n", "write it as 2500 or 2.5e+3"),
        ("strategies:\n  - {name: a,\n     cost: 1:30}\n",
         "line 3: strategies[0].cost: YAML 1.1 reads 1:30 as a base-60 number (90); write it "
         "in decimal (e.g. 90)"),
        ("strategies:\n  - {name: s0, cost: 0}\n  - {name: direct, cost: 1, retriever: bm25, "
         "k: 3}\n", "strategies[1] (direct): 'direct' is the name of a framework adapter's "
         "built-in branch (direct, retrieve, multi_step), and this strategy retrieves in its "
         "own way (its retriever or k): an adapter would send its questions down the direct "
         "branch"),
        ("strategies:\n  - {name: s0, cost: 0}\n  - {name: multi_step, cost: 1, steps: 1}\n",
         "strategies[1] (multi_step): 'multi_step' is the name of a framework adapter's"),
        ("strategies:\n  - {name: retrieve, cost: 0}\n", "runs what the direct branch runs"),
    ],
)  # fmt: skip
def test_bad_strategy_files_are_refused_naming_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        load_strategies(path)
    assert str(path) in str(e.value)


def test_names_of_adapter_branches_that_fit_and_a_sexagesimal_free_file_load(tmp_path):
    reg = load_strategies(write(tmp_path, """
strategies:
  - {name: direct, cost: 0}
  - {name: retrieve, cost: 1, retriever: default, generator: 'http://127.0.0.1:8000/v1'}
  - {name: multi_step, max_steps: 4}
"""))  # fmt: skip
    assert reg.names == ("direct", "retrieve", "multi_step") and reg["multi_step"].max_steps == 4


def test_a_branch_name_on_another_run_is_refused_in_python_too():
    """A spec built in Python skips the file's check: `branch_of` refuses it (it returned the
    name, and `branches_of` dropped it as a built-in branch: its questions ran `direct`)."""
    from retrieval_gate.integrations.branches import branch_of
    from retrieval_gate.strategies import StrategySpec

    with pytest.raises(ConfigError, match="'direct' is the name of a framework adapter's"):
        branch_of(StrategySpec("direct", 1.0, "bm25", 3))
    assert branch_of(StrategySpec("direct", 0.0)) == "direct"


def test_duplicate_names_are_found_in_linear_time():
    """registry_from_list compared each name with every earlier one: 20,000 took 65 s."""
    import time

    from retrieval_gate.strategies import registry_from_list

    items = [{"name": f"s{i}", "cost": i} for i in range(10_000)]
    start = time.perf_counter()
    assert len(registry_from_list(items, "strategies")) == 10_000
    assert time.perf_counter() - start < 3.0  # 0.13 s; quadratic, 16 s


SWAPPED = ("strategies:\n  - {name: s0, cost: 0}\n"
           "  - {name: s2, cost: 1, retriever: default, steps: multi}\n"
           "  - {name: s1, cost: 3, retriever: default}\n")  # fmt: skip


def test_costs_out_of_the_label_files_order_are_refused(tmp_path):
    """A file pricing s0 0, s2 1, s1 3 against labels ordered s0, s1, s2: train calibrated the
    router at [0, 3, 1] and evaluate's oracle picked the dearer strategy, unsaid."""
    path = write(tmp_path, SWAPPED)
    said = f"labels: the registry ({path}) prices them s0 0, s1 3, s2 1, not cheapest first"
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_strategies(path).costs_in_order(("s0", "s1", "s2"), "labels")
    assert load_strategies(path).costs_in_order(("s0", "s2", "s1"), "x") == (0.0, 1.0, 3.0)


def test_a_strategies_file_pricing_a_routers_strategies_otherwise_is_refused(tmp_path):
    """score, serve and rag took a file whose costs were not the router's: the budget was read
    in the router's unit, /health showed the file's costs."""
    from retrieval_gate.rag.decisions import loop_registry

    spec = "  - {{name: s0, cost: 0}}\n  - {{name: s1, cost: {}, retriever: default}}\n"
    own = load_strategies(write(tmp_path, "strategies:\n" + spec.format(1)))
    path = tmp_path / "other.yaml"
    path.write_text("strategies:\n" + spec.format(50))

    class Carrying(FourRouter):
        costs = dict(zip(own.names, own.costs(own.names), strict=True))

        def __init__(self):
            self.strategies = own.names

        def strategy_registry(self):
            return own

    with pytest.raises(ConfigError, match=re.escape(
            "router 'four-router' was calibrated at costs [0.0, 1.0] of ['s0', 's1']; "
            f"--strategies ({path}) prices them at [0.0, 50.0]")):  # fmt: skip
        check_router(Carrying(), None, load_strategies(path))
    assert loop_registry(Carrying(), own) == own  # the same costs

    class NamesOnly(Carrying):  # a router of a label file's own names carries no specs
        def strategy_registry(self):
            raise ConfigError("names only")

    assert loop_registry(NamesOnly(), own).costs(own.names) == (0.0, 1.0)
    with pytest.raises(ConfigError, match=r"prices them at \[0.0, 50.0\]"):
        loop_registry(NamesOnly(), load_strategies(path))

    class Priced(FourRouter):  # built-in names at the router's own costs (model.costs)
        costs = dict(zip(BUILTIN.names[:2], (0.0, 7.0), strict=True))

        def __init__(self):
            self.strategies = BUILTIN.names[:2]

        def strategy_registry(self):
            return StrategyRegistry(tuple(replace(BUILTIN[n], cost=c)
                                          for n, c in self.costs.items()), "own")  # fmt: skip

    assert check_router(Priced()) == BUILTIN  # without --strategies: the router's own costs


@pytest.mark.parametrize("verb", ["rag", "serve", "evaluate", "tune"])
def test_every_verb_checks_the_file_before_anything_starts(tmp_path, capsys, verb):
    path = write(tmp_path, "strategies:\n  - {name: a, cost: 0}\n  - {name: a, cost: 1}\n")
    with pytest.raises(SystemExit) as e:
        main([verb, "--strategies", str(path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "duplicate name 'a'" in err and str(path) in err


def test_label_takes_names_or_a_file(tmp_path, capsys):
    path = write(tmp_path, "strategies:\n  - {name: a, cost: 1}\n  - {name: a, cost: 1}\n")
    assert main(["label", "--policy", "strategies", "--strategies", str(path),
                 "--dataset", "retrievalqa", "--limit", "2"]) == 2  # fmt: skip
    assert "duplicate name 'a'" in capsys.readouterr().err
    other = tmp_path / "dense.yaml"
    other.write_text("strategies:\n  - {name: no_retrieval}\n"
                     "  - {name: dense_top2, cost: 1, retriever: dense, k: 2}\n")  # fmt: skip
    assert main(["label", "--policy", "strategies", "--strategies", str(other),
                 "--dataset", "retrievalqa", "--limit", "2", "--retriever", "bm25",
                 "--labels-dir", str(tmp_path / "labels")]) == 2  # fmt: skip
    assert "cannot run strategy dense_top2 (dense retriever" in capsys.readouterr().err
    assert not (tmp_path / "labels").exists()


def test_a_strategy_with_its_own_generator_is_refused_for_that_reason(tmp_path, capsys):
    """The hint was "pass --retriever bm25" with --retriever bm25 given: the generator: line,
    not the retriever, is what this run cannot honour."""
    path = write(tmp_path, "strategies:\n  - {name: no_retrieval}\n  - {name: b3, cost: 0.5, "
                 "retriever: bm25, generator: 'http://127.0.0.1:9/v1'}\n")  # fmt: skip
    assert main(["label", "--policy", "strategies", "--strategies", str(path),
                 "--dataset", "retrievalqa", "--limit", "2", "--retriever", "bm25",
                 "--labels-dir", str(tmp_path / "labels")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "cannot run strategy b3 (generator http://127.0.0.1:9/v1): it names its own " in err
    assert "drop its generator: line" in err and "pass --retriever" not in err
    assert not (tmp_path / "labels").exists()
    with pytest.raises(ConfigError, match="b3 .*names its own generator") as e:
        check_modes(["b3"], ModeOptions(strategies=load_strategies(path), retriever="bm25"))
    assert "pass --retriever" not in str(e.value)


def test_a_training_config_takes_a_strategies_section():
    from retrieval_gate.training.config import TrainConfig

    items = [{"name": "no_retrieval"}, {"name": "bm25_top3", "cost": 0.6, "retriever": "bm25",
                                        "k": 3}, {"name": "one_retrieval"}]  # fmt: skip
    config = TrainConfig.from_dict({"strategies": items})
    assert config.registry().names == NAMES[:3]
    assert TrainConfig.from_dict(config.to_dict()).registry() == config.registry()
    assert TrainConfig.from_dict({"strategies": str(FOUR)}).registry().names == NAMES
    with pytest.raises(ConfigError, match=r"config strategies\[1\] \(b\): missing cost"):
        TrainConfig.from_dict({"strategies": [{"name": "a", "cost": 0}, {"name": "b"}]})


# ---------------------------------------------------------------- four strategies, one loop


def test_four_strategies_through_the_loop():
    reg = load_strategies(FOUR)
    questions = [q(i, t) for i, t in enumerate([
        "Capital of France?", "Who wrote the tragedy Hamlet?", "Where was Hamlet written?",
        "Who founded the city where Hamlet was written?"])]  # fmt: skip
    ret, gen = Recording(), ScriptedGenerator()
    run = AdaptiveRAG(FourRouter(), ret, gen, k=5, strategies=reg).run(questions)
    assert [a.strategy for a in run.answers] == list(NAMES)
    assert [a.retrieve for a in run.answers] == [False, True, True, True]
    assert [len(a.documents) for a in run.answers[:3]] == [0, 3, 5]  # bm25_top3 keeps its top 3
    assert ret.calls[0] == (3, 5)  # ONE first retrieval call, at the largest k
    assert len(gen.calls[0]) == 4  # closed-book, both with-context prompts, step 1 together
    by = run.costs.by_strategy
    assert {s: (c.questions, c.retrievals) for s, c in by.items() if s != "multi_step"} == {
        "no_retrieval": (1, 0), "bm25_top3": (1, 1), "one_retrieval": (1, 1)}  # fmt: skip
    # the oracle over the fixed-strategy runs picks the cheapest strategy that answered
    fixed = [AdaptiveRAG(FixedStrategy(n, registry=reg), ret, gen, k=5).run(questions)
             for n in NAMES]  # fmt: skip
    oracle = oracle_from_run(fixed[0], fixed[2], fixed[3], fixed[1], strategies=reg)
    assert set(oracle.strategies) == set(NAMES) and len(oracle.route(questions)) == 4


def test_the_loop_refuses_what_it_cannot_run():
    ret, gen = BM25Retriever(DOCS), ScriptedGenerator()
    dense = StrategyRegistry((*BUILTIN.specs[:1], load_strategies(FOUR)["bm25_top3"]), "t")
    from dataclasses import replace

    dense = StrategyRegistry((dense.specs[0], replace(dense.specs[1], retriever="dense")), "t")
    with pytest.raises(ConfigError, match="strategy 'bm25_top3' retrieves with dense"):
        AdaptiveRAG(FixedStrategy("no_retrieval", registry=dense), ret, gen, strategies=dense)
    own = StrategyRegistry((BUILTIN.specs[0], replace(BUILTIN.specs[1], generator="http://x")))
    with pytest.raises(ConfigError, match="names its own generator"):
        AdaptiveRAG(FixedStrategy("no_retrieval", registry=own), ret, gen, strategies=own)
    with pytest.raises(ConfigError, match="unknown strategy 'bm25_top3'"):
        AdaptiveRAG(FourRouter(), ret, gen)  # not registered, and the router carries no spec


def test_rag_modes_take_every_registered_strategy():
    reg = load_strategies(FOUR)
    assert "bm25_top3" in known_modes(reg) and "bm25_top3" not in known_modes()
    check_modes(["bm25_top3", "never"], ModeOptions(strategies=reg, retriever="bm25"))
    with pytest.raises(ConfigError, match="cannot run strategy bm25_top3"):
        check_modes(["bm25_top3"], ModeOptions(strategies=reg, retriever="dense"))
    with pytest.raises(ConfigError, match="unknown mode 'bm25_top3'"):
        check_modes(["bm25_top3"], ModeOptions())


# ---------------------------------------------------------------- a router carries its specs


def test_a_router_calibration_carries_specs_and_old_ones_resolve_to_builtins():
    reg = load_strategies(FOUR)
    P = np.array([[0.9, 0.5, 0.6, 0.7], [0.1, 0.6, 0.8, 0.9]])
    cal = Calibration.fit(NAMES, reg.costs(NAMES), P, (P > 0.5).astype(float), budget=1.0,
                          registry=reg)  # fmt: skip
    again = Calibration.from_dict(cal.to_dict())
    assert again.registry() == StrategyRegistry(reg.specs, again.registry().source)
    old = {k: v for k, v in cal.to_dict().items() if k != "specs"}  # an export before issue 36
    with pytest.raises(ConfigError, match="'bm25_top3' is not a built-in.*--strategies FILE"):
        Calibration.from_dict(old).registry()
    three = Calibration.fit(BUILTIN.names, (0, 1, 3.35), P[:, [0, 2, 3]], (P[:, [0, 2, 3]] > 0.5)
                            .astype(float))  # fmt: skip
    assert "specs" not in three.to_dict() and three.registry().names == BUILTIN.names
    assert specs_of(None, BUILTIN.names, "x").specs == BUILTIN.specs


def test_a_router_with_its_own_specs_runs_without_a_file_and_a_budget_is_capped():
    reg = load_strategies(FOUR)

    class Carrying(FourRouter):
        costs = dict(zip(NAMES, reg.costs(NAMES), strict=True))

        def strategy_registry(self):
            return reg

    router = Carrying()
    loop_reg = check_router(router)
    assert loop_reg["bm25_top3"].k == 3
    with pytest.raises(InputError, match=r"--budget 4.0: .*\(3.35\)"):
        check_router(router, 4.0)
    run = AdaptiveRAG(router, Recording(), ScriptedGenerator(), k=5).run(
        [q(1, "Who wrote the tragedy Hamlet?")]
    )
    assert run.answers[0].strategy == "bm25_top3" and len(run.answers[0].documents) == 3


def test_a_router_of_a_label_files_own_names_runs_with_the_verbs_strategies_file(capsys):
    """A router trained on a label file's own strategy names exports the names only: `score`
    refused it, naming a --strategies flag it did not have and a re-export that changed
    nothing. The verb's --strategies declares them (score has it too)."""
    from retrieval_gate.cli import build_parser
    from retrieval_gate.pricing import Calibration
    from retrieval_gate.rag.decisions import loop_registry

    reg = load_strategies(FOUR)
    P = np.array([[0.9, 0.5, 0.6, 0.7], [0.1, 0.6, 0.8, 0.9]])
    cal = Calibration.fit(NAMES, reg.costs(NAMES), P, (P > 0.5).astype(float), budget=1.0)

    class NamesOnly(FourRouter):
        costs = dict(zip(NAMES, reg.costs(NAMES), strict=True))

        def strategy_registry(self):
            return cal.registry()

    with pytest.raises(ConfigError, match=r"declare them with --strategies FILE.yaml .* or "
                       "train with that file as the config's `strategies:`"):  # fmt: skip
        loop_registry(NamesOnly())
    assert loop_registry(NamesOnly(), reg)["bm25_top3"].k == 3
    argv = ["score", "--model", "m", "--input", "q.txt", "--strategies", str(FOUR)]
    args = build_parser(argv).parse_args(argv)
    assert args.strategies.names == reg.names


def test_a_router_is_scored_on_labels_of_its_own_strategies():
    """`evaluate` and `tune` of a router on a label file of other strategies: as many, other
    names were paired by position, unsaid; fewer or more broke the costs' shapes (a
    traceback, exit 1)."""
    from retrieval_gate.evaluation.routing_policies import routing_report
    from retrieval_gate.tuning.router_budgets import same_strategies

    same_strategies(FourRouter(), NAMES)
    for labels in (NAMES[:3], ("a", "b", "c", "d")):
        with pytest.raises(ConfigError, match=r"router 'four-router' routes among no_retrieval, "
                           r"bm25_top3, one_retrieval, multi_step, and the labels hold"):  # fmt: skip
            same_strategies(FourRouter(), labels)

    class Labels:  # what routing_report reads first
        strategies = NAMES[:3]

    with pytest.raises(ConfigError, match="evaluate and tune a router on labels of its own"):
        routing_report(Labels(), Labels(), {"four": FourRouter()}, Path("unused"), "x")


def test_train_and_evaluate_price_a_label_files_strategies_in_its_order(tmp_path):
    """`train` (its config check, before the frozen-body pass) and `evaluate` / `tune`'s
    pricing refuse costs out of the label file's strategy order."""
    from retrieval_gate.evaluation.routing_policies import registry_costs
    from retrieval_gate.training.config import TrainConfig

    path = write(tmp_path, SWAPPED)
    said = re.escape(f"the registry ({path}) prices them s0 0, s1 3, s2 1, not cheapest first")
    with pytest.raises(ConfigError, match="the label file's strategies: " + said):
        registry_costs(load_strategies(path), ("s0", "s1", "s2"))
    config = TrainConfig.from_dict({"strategies": str(path), "data": {"label_file": "l.jsonl"}})
    with pytest.raises(ConfigError, match=r"data.label_file l.jsonl \(its strategies\): " + said):
        config.router_costs(("s0", "s1", "s2"))
    assert config.router_costs(("s0", "s2", "s1")) == (0.0, 1.0, 3.0)
    assert registry_costs(load_strategies(path), ("s0", "s2", "s1")) == (0.0, 1.0, 3.0)


def test_adapter_branches_come_from_specs():
    from retrieval_gate.integrations.branches import branch_of

    reg = load_strategies(FOUR)
    assert [branch_of(s) for s in reg] == ["direct", "bm25_top3", "retrieve", "multi_step"]


# ---------------------------------------------------------------- defaults that work


def test_learned_prior_rule():
    S = ("a", "b", "c")
    rows = [("x", {"a": False, "b": True, "c": True}), ("x", {"a": False, "b": False, "c": True}),
            ("y", {"a": False, "b": False, "c": False}), ("z", {"a": True, "b": True, "c": False})]  # fmt: skip
    prior = LearnedPrior.count(rows, S)
    assert prior.pick("x") == "c"  # most correct for its own source
    assert prior.pick("y") == "b"  # none of its own: most overall (b 2, c 2: the cheaper)
    assert prior.pick("new") == "b"
    assert LearnedPrior.count([("y", dict.fromkeys(S, False))], S).pick("y") == "a"  # cheapest


def test_label_strategies_on_a_source_without_a_prior(tmp_path):
    """`label --policy strategies` on RetrievalQA (no Adaptive-RAG prior) labels instead of
    refusing; unanswered questions get the learned prior, re-counted over the file."""
    from retrieval_gate.labelling.loop_labelling import StrategyLabelling, label_strategies

    questions = [q(0, "Who wrote the tragedy Hamlet?", ("Shakespeare",), "retrievalqa"),
                 q(1, "Capital of France?", ("Paris",), "retrievalqa"),
                 q(2, "Highest mountain?", ("nowhere",), "retrievalqa")]  # fmt: skip
    out = tmp_path / "strategies.jsonl"
    req = StrategyLabelling(questions, out, "scripted", "bm25", k=5, chunk_size=1,
                            registry=load_strategies(FOUR))  # fmt: skip
    result = label_strategies(req, ScriptedGenerator(), BM25Retriever(DOCS))
    assert result["rows"] == 3
    labels = read_strategy_labels(out)
    assert labels.strategies == NAMES
    assert labels.meta["prompt_ids"]["bm25_top3"] == "retrievalqa-with-context-v1"
    assert labels.meta["strategy_specs"][1]["k"] == 3
    unanswered = [r for r in labels.rows.values() if r["cheapest"] is None]
    assert unanswered and all(r["target_from"] == "learned" for r in unanswered)
    counts = np.array([[r["correct"][s] for s in NAMES] for r in labels.rows.values()]).sum(0)
    best = NAMES[int(np.argmax(counts))] if counts.max() else NAMES[0]
    assert all(r["target"] == best for r in unanswered)
    costs = next(iter(labels.rows.values()))["cost"]
    assert (costs["no_retrieval"], costs["bm25_top3"], costs["one_retrieval"]) == (0.0, 0.6, 1.0)


def test_a_strategies_sidecar_no_row_was_written_under_binds_no_settings(tmp_path):
    """A run stopped before its first chunk left strategies.meta.json and no row: it refused
    every other setting ("made with k=5"), naming a file that did not exist to move."""
    from retrieval_gate.labelling.loop_labelling import StrategyLabelling, label_strategies

    questions = [q(0, "Who wrote the tragedy Hamlet?", ("Shakespeare",), "retrievalqa")]
    out = tmp_path / "strategies.jsonl"
    out.with_name("strategies.meta.json").write_text(json.dumps(
        {"source": "generator", "policy": "strategies", "k": 9}))  # fmt: skip
    req = StrategyLabelling(questions, out, "scripted", "bm25", k=5, chunk_size=1,
                            registry=load_strategies(FOUR))  # fmt: skip
    assert label_strategies(req, ScriptedGenerator(), BM25Retriever(DOCS))["rows"] == 1
    assert json.loads(out.with_name("strategies.meta.json").read_text())["k"] == 5


# ---------------------------------------------------------------- one home for the names


def test_no_module_outside_the_registry_names_a_strategy():
    pattern = re.compile(r"[\"'](no_retrieval|one_retrieval|multi_step)[\"']")
    src = ROOT / "src" / "retrieval_gate"
    naming = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                    if pattern.search(p.read_text(encoding="utf-8")))  # fmt: skip
    assert naming == ["strategies.py"], naming


def test_a_builtin_name_with_some_keys_keeps_the_rest(tmp_path):
    reg = load_strategies(
        write(
            tmp_path,
            """
strategies:
  - {name: no_retrieval}
  - {name: one_retrieval, cost: 2, k: 3}
  - {name: multi_step, cost: 6}
""",
        )
    )
    one, multi = reg["one_retrieval"], reg["multi_step"]
    assert (one.cost, one.retriever, one.k, one.multi_step) == (2.0, "default", 3, False)
    assert (multi.cost, multi.retriever, multi.multi_step) == (6.0, "default", True)


class CarryingFour(FourRouter):
    """The four-strategy router of an export that carries its specs."""

    def strategy_registry(self):
        return load_strategies(FOUR)


def test_adapters_route_a_fourth_strategy_down_its_own_branch():
    pytest.importorskip("langchain_core")
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter

    def branch(name):
        return RunnableLambda(lambda x, name=name: name)

    items = [{"question": f"question {i}"} for i in range(4)]
    with pytest.raises(ConfigError, match="strategy 'bm25_top3'.*bm25_top3=..."):
        GateRouter(CarryingFour(), branch("retrieve"), branch("direct"), branch("multi"))
    router = GateRouter(CarryingFour(), branch("retrieve"), branch("direct"), branch("multi"),
                        branches={"bm25_top3": branch("bm25_top3")})  # fmt: skip
    assert router.batch(items) == ["direct", "bm25_top3", "retrieve", "multi"]
    assert router.decide(items) == [False, True, True, True]


def test_a_langchain_router_refuses_a_strategy_named_after_a_branch_it_does_not_run():
    """A bm25 top-3 strategy named `direct`: GateRouter's branches were ['direct',
    'multi_step'] and its questions ran the no-retrieval chain, unsaid."""
    pytest.importorskip("langchain_core")
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.strategies import StrategySpec

    specs = (*BUILTIN.specs[:1], StrategySpec("direct", 1.0, "bm25", 3), *BUILTIN.specs[2:])

    class Clashing(FourRouter):
        def __init__(self):
            self.strategies = tuple(s.name for s in specs)

        def strategy_registry(self):
            return StrategyRegistry(specs, "python")

    chain = RunnableLambda(lambda x: x)
    with pytest.raises(ConfigError, match="strategy 'direct': 'direct' is the name of a "):
        GateRouter(Clashing(), chain, chain, chain)


def test_haystack_has_an_output_socket_for_the_fourth_strategy():
    pytest.importorskip("haystack")
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    component = RetrievalGateRouter(CarryingFour())
    assert component.branches == ["direct", "bm25_top3", "retrieve", "multi_step"]
    out = component.run("question 1")
    assert (out["bm25_top3"], out["strategy"]) == ("question 1", "bm25_top3")


def test_the_issue_command_labels_retrievalqa_without_a_prior_flag(tmp_path, capsys, monkeypatch):
    """Issue 36's example (`label --policy strategies --dataset retrievalqa --limit 3
    --retriever contexts`) used to refuse: 'source retrievalqa has no prior strategy'. A
    generator server in a thread stands in for the engine (every answer "Paris")."""
    from test_strategy_labels import _FakeServer

    monkeypatch.setenv("RETRIEVAL_GATE_NO_CACHE", "1")
    server = _FakeServer()
    try:
        code = main(["label", "--policy", "strategies", "--dataset", "retrievalqa", "--limit", "3",
                     "--retriever", "contexts", "--generator-url", server.url,
                     "--labels-dir", str(tmp_path / "labels"), "--max-steps", "2"])  # fmt: skip
    finally:
        server.close()
    assert code == 0, capsys.readouterr().err
    labels = read_strategy_labels(tmp_path / "labels" / "fake-llm" / "strategies.jsonl")
    assert len(labels.rows) == 3 and labels.strategies == BUILTIN.names
    for row in labels.rows.values():
        assert row["source"] == "retrievalqa"
        assert row["target_from"] in ("cheapest", "learned") and row["target"] in BUILTIN.names
    assert any(r["target_from"] == "learned" for r in labels.rows.values())


def test_rag_refuses_a_strategy_named_as_one_of_its_modes(tmp_path, capsys):
    """A strategy called `never` (a gate) or `router` took that mode's place unseen."""
    path = write(tmp_path, "strategies:\n  - {name: no_retrieval}\n"
                           "  - {name: router, cost: 1, retriever: bm25}\n")  # fmt: skip
    assert main(["rag", "--modes", "never", "--strategies", str(path), "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert "strategy 'router' of --strategies has the name of a rag mode" in err, err
    assert str(path) in err
