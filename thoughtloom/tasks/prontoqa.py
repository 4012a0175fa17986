"""PrOntoQA (as llm-reasoners' RAP runs it): prove or refute a claim about an entity from a small ontology.

A problem is the facts and rules followed by the query ("... Alex is a butterfly. True or false: Alex
is six-legged."). A step applies one rule to the last thing proved about the entity, written as the
original's chains write it: "Each butterfly is a lepidopteran. So Alex is a lepidopteran." Every step
is checked against the problem's own rules (the rule must be one of them and apply; a wrong
conclusion is repaired), and the task lists the rules that apply, so the model chooses among them
and the LM-free control chooses by chance. The search ends when the query's property is proved
either way; the answer is the chain and "The answer is true/false.".

Scoring, as llm-reasoners scores it: answer accuracy compares the stated true/false with the
gold; proof accuracy compares the conclusions (the text after each "So", one per line) with the gold
chain's conclusions exactly. The gold is what the problem's rules entail (the chain from the
entity's fact to the query's property), which equals the data file's gold on all its examples.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..graph import NodeKind
from .base import ProblemError, Query, Task, Verdict, few_shot_query

_QUERY = re.compile(r"True or false:\s*(?P<claim>[^.]+)\.?\s*$", re.IGNORECASE)
_RULE_EACH = re.compile(r"^(?:every|each)\s+(?P<s>.+?)\s+is\s+(?P<neg>not\s+)?(?P<art>an?\s+)?(?P<o>.+)$",
                        re.IGNORECASE)
_RULE_ARE = re.compile(r"^(?P<s>.+?)\s+are\s+(?P<neg>not\s+)?(?P<o>.+)$", re.IGNORECASE)
_CLAIM = re.compile(r"^(?P<who>[A-Z0-9]\w*)\s+is\s+(?P<neg>not\s+)?(?P<art>an?\s+)?(?P<o>.+)$")
_ANSWER = re.compile(r"answer is\s*:?\s*(true|false)", re.IGNORECASE)
_STARTS_TF = re.compile(r"^\W*(true|false)\b", re.IGNORECASE)


def singular(word: str) -> str:
    """A plural noun's singular (the last word of a name: "painted ladies" -> "painted lady")."""
    head, _, last = word.rpartition(" ")
    if last.endswith("ies"):
        last = last[:-3] + "y"
    elif re.search(r"(?:ss|sh|ch|x|us)es$", last):
        last = last[:-2]
    elif last.endswith("s") and not last.endswith("ss"):
        last = last[:-1]
    return f"{head} {last}" if head else last


def _article(term: str) -> str:
    return "an" if term[:1] in "aeiou" else "a"


@dataclass(frozen=True, slots=True)
class Property:
    """What is said of a thing: a category (noun) or an adjective, affirmed or negated."""

    term: str
    noun: bool
    negated: bool = False

    def said_of(self, who: str) -> str:
        """The sentence the original writes: "Alex is not an insect." / "Alex is six-legged."."""
        article = f"{_article(self.term)} " if self.noun else ""
        return f"{who} is {'not ' if self.negated else ''}{article}{self.term}."


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule of the ontology: every `subject` has `then`; `text` as the problem writes it."""

    subject: str
    then: Property
    text: str


@dataclass(frozen=True, slots=True)
class Ontology:
    """A PrOntoQA problem: the rules, the entity and its known property, and the query."""

    rules: tuple[Rule, ...]
    entity: str
    fact: Property
    query: Property
    text: str


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", text.strip()) if s.strip()]


def _is_noun(word: str, article: bool, nouns: set[str]) -> bool:
    if article:
        return True
    if singular(word) in nouns or word in nouns:
        return True
    return word.endswith("s") and not word.endswith("ous")


def parse_ontology(text: str) -> Ontology:
    """The rules, the entity's fact and the query of a PrOntoQA problem; ProblemError naming what is missing."""
    body, sep, query_text = text.strip().rpartition("True or false:")
    q = _QUERY.search(f"True or false:{query_text}") if sep else None
    if q is None:
        raise ProblemError("prontoqa needs the facts and rules, then 'True or false: CLAIM.' (e.g. 'Each cat is a "
                           "mammal. Tom is a cat. True or false: Tom is a mammal.')")
    sentences = [s.rstrip(".") for s in _sentences(body)]
    # Nouns first: a rule's subject is always a category, so its object is read as one where it names a known one.
    nouns: set[str] = set()
    for s in sentences:
        if (m := _RULE_EACH.match(s)) is not None:
            nouns.add(m.group("s").lower())
            if m.group("art"):
                nouns.add(m.group("o").lower())
        elif (m := _RULE_ARE.match(s)) is not None:
            nouns.add(singular(m.group("s").lower()))
        elif (m := _CLAIM.match(s)) is not None and m.group("art"):
            nouns.add(m.group("o").lower())
    rules: list[Rule] = []
    facts: list[tuple[str, Property]] = []
    for s in sentences:
        if (m := _RULE_EACH.match(s)) is not None:
            o = m.group("o")
            noun = _is_noun(o.lower(), bool(m.group("art")), nouns)
            rules.append(Rule(m.group("s").lower(), Property(o, noun, bool(m.group("neg"))), s + "."))
        elif (m := _RULE_ARE.match(s)) is not None:
            o = m.group("o")
            noun = _is_noun(o.lower(), False, nouns)
            rules.append(Rule(singular(m.group("s").lower()), Property(singular(o) if noun else o, noun,
                                                                        bool(m.group("neg"))), s + "."))
        elif (m := _CLAIM.match(s)) is not None:
            o = m.group("o")
            facts.append((m.group("who"), Property(o, _is_noun(o.lower(), bool(m.group("art")), nouns),
                                                   bool(m.group("neg")))))
        else:
            raise ProblemError(f"prontoqa: cannot read {s + '.'!r}; write rules as 'Each X is a Y.' or 'Xs are Ys.' "
                               "and the fact as 'NAME is a X.'")
    if not facts:
        raise ProblemError("prontoqa: no fact about an entity (e.g. 'Alex is a butterfly.') before the query")
    who, fact = facts[-1]
    c = _CLAIM.match(q.group("claim").strip())
    if c is None or c.group("who") != who:
        raise ProblemError(f"prontoqa: the query must be a claim about {who}, e.g. 'True or false: {who} is X.'")
    o = c.group("o")
    query = Property(o, _is_noun(o.lower(), bool(c.group("art")), nouns), bool(c.group("neg")))
    return Ontology(tuple(rules), who, fact, query, " ".join(text.split()))


def applicable(ontology: Ontology, last: Property) -> list[Rule]:
    """The rules that apply to the last property proved (a category the entity belongs to), in the problem's order."""
    if last.negated or not last.noun:
        return []
    return [r for r in ontology.rules if r.subject == last.term.lower()]


def gold_chain(ontology: Ontology) -> list[Rule] | None:
    """The shortest chain of rules from the entity's fact to the query's property (either way), or None."""
    frontier: list[tuple[Property, list[Rule]]] = [(ontology.fact, [])]
    seen = {ontology.fact}
    while frontier:
        nxt: list[tuple[Property, list[Rule]]] = []
        for last, chain in frontier:
            for rule in applicable(ontology, last):
                if rule.then.term.lower() == ontology.query.term.lower():
                    return [*chain, rule]
                if rule.then not in seen:
                    seen.add(rule.then)
                    nxt.append((rule.then, [*chain, rule]))
        frontier = nxt
    return None


def gold(ontology: Ontology) -> tuple[bool, tuple[str, ...]] | None:
    """The entailed answer (True: the query holds) and the gold chain's conclusions; None when nothing is entailed."""
    chain = gold_chain(ontology)
    if chain is None:
        return None
    return chain[-1].then.negated == ontology.query.negated, tuple(r.then.said_of(ontology.entity) for r in chain)


def stated_answer(text: str | None) -> bool | None:
    """The true/false an answer states: the last 'the answer is true/false', else a reply that opens with one."""
    if not text:
        return None
    found = _ANSWER.findall(text)
    if found:
        return found[-1].lower() == "true"
    m = _STARTS_TF.match(text)
    return m.group(1).lower() == "true" if m else None


def proof_conclusions(text: str | None) -> tuple[str, ...]:
    """The conclusions of a chain as llm-reasoners reads them: per '.'-sentence containing 'So', what follows it."""
    return tuple(s.split("So")[1].strip() + "." for s in (text or "").split(".") if "So" in s)


def answer_correct(gold_answer: bool, answer: str | None) -> bool:
    """Answer accuracy: the stated true/false is the gold one."""
    return stated_answer(answer) is gold_answer


def proof_correct(gold_conclusions: Sequence[str], answer: str | None) -> bool:
    """Proof accuracy: the conclusions, one per line, equal the gold chain's exactly."""
    return "\n".join(proof_conclusions(answer)) == "\n".join(gold_conclusions)


# Written for this project (invented categories, not examples of the data set): (question, chain, answer).
SOLVED: tuple[tuple[str, str, str], ...] = (
    ("Every feline is a mammal. Cats are felines. Each reptile is cold-blooded. Mammals are warm-blooded. "
     "Tom is a cat. True or false: Tom is not warm-blooded.",
     "Tom is a cat. Cats are felines. So Tom is a feline. Every feline is a mammal. So Tom is a mammal. "
     "Mammals are warm-blooded. So Tom is warm-blooded.", "false"),
    ("Each oak is a tree. Every fern is green. Trees are plants. Plants are not mobile. Oaks are tall. "
     "Olive is an oak. True or false: Olive is not mobile.",
     "Olive is an oak. Each oak is a tree. So Olive is a tree. Trees are plants. So Olive is a plant. "
     "Plants are not mobile. So Olive is not mobile.", "true"),
)
EXAMPLES: tuple[tuple[str, str], ...] = tuple((f"Q: {q}", f"A: {chain} The answer is {tf}.") for q, chain, tf in SOLVED)
INSTRUCTION = ("Answer the question with a chain of reasoning: each step names one rule from the question and "
               "what follows from it, after 'So'. End with 'The answer is true.' or 'The answer is false.'")


class ProntoQATask(Task[Ontology]):
    """PrOntoQA proofs, one checked rule application per step; scored by answer accuracy."""

    name = "prontoqa"
    description = ("PrOntoQA (RAP): 'RULES. NAME is a X. True or false: NAME is Y.'; each step applies a rule; "
                   "answer accuracy")
    programmatic_answer = True
    # RAP's reward starts from the model's likelihood of each step: evaluation=prior. Chains are 3-5 rules long.
    search_defaults = {"generation": "sample", "breadth": 3, "beam": 3, "max_depth": 6, "evaluation": "prior"}
    free_text_steps = False
    lists_choices = True

    def parse_problem(self, text: str) -> Ontology:
        """The rules and the entity's fact, then 'True or false: CLAIM.'."""
        if not text.strip():
            raise ProblemError("empty problem for task prontoqa; give the rules, a fact and 'True or false: CLAIM.'")
        return parse_ontology(text)

    def root_content(self, problem: Ontology) -> str:
        """The question as given."""
        return problem.text

    def describe(self, problem: Ontology) -> dict[str, object]:
        """The entity and how many rules."""
        return {"entity": problem.entity, "rules": len(problem.rules)}

    # --- state --------------------------------------------------------------------------

    def last(self, problem: Ontology, steps: Sequence[str]) -> Property:
        """The last property proved (the entity's fact before any step)."""
        if not steps:
            return problem.fact
        rule = self._rule_of(problem, steps[-1])
        assert rule is not None, f"validated step names no rule: {steps[-1]!r}"
        return rule.then

    def _rule_of(self, problem: Ontology, step: str) -> Rule | None:
        first = _sentences(step)[0] if _sentences(step) else ""
        key = " ".join(first.lower().rstrip(".").split())
        return next((r for r in problem.rules if " ".join(r.text.lower().rstrip(".").split()) == key), None)

    def state_key(self, problem: Ontology, steps: Sequence[str]) -> Hashable:
        """The last property proved: the chain goes on from there alone."""
        last = self.last(problem, steps)
        return last.term.lower(), last.negated

    def is_goal(self, problem: Ontology, steps: Sequence[str]) -> bool:
        """The query's property is proved, one way or the other."""
        return bool(steps) and self.last(problem, steps).term.lower() == problem.query.term.lower()

    def is_terminal(self, problem: Ontology, steps: Sequence[str]) -> bool:
        """Decided, or no rule applies any more."""
        return self.is_goal(problem, steps) or not applicable(problem, self.last(problem, steps))

    def thought_kind(self, problem: Ontology, steps: Sequence[str]) -> NodeKind:
        """A step deciding the query ends a candidate proof."""
        return NodeKind.SOLUTION if self.is_goal(problem, steps) else NodeKind.HYPOTHESIS

    def quality(self, problem: Ontology, steps: Sequence[str], score: float) -> float:
        """1 where the goal is reached; a partial path, however well valued, stays below any goal threshold."""
        return 1.0 if self.is_goal(problem, steps) else score / 2

    # --- generate -----------------------------------------------------------------------

    def _steps_text(self, problem: Ontology, steps: Sequence[str]) -> str:
        return " ".join([problem.fact.said_of(problem.entity), *steps])

    def sample(self, problem: Ontology, steps: Sequence[str]) -> Query:
        """The chain so far in RAP's CoT layout, continued by one rule and its conclusion; the rules that apply are
        the choices."""
        user = f"Q: {problem.text}\nA: {self._steps_text(problem, steps)}"
        q = few_shot_query(INSTRUCTION, EXAMPLES, user, 48, stop=("\n",))
        last = self.last(problem, steps)
        choices = tuple(f"{r.text} So {r.then.said_of(problem.entity)}" for r in applicable(problem, last))
        return Query(q.prompt, max_tokens=48, stop=("\n",), choices=choices)

    def parse_sample(self, problem: Ontology, steps: Sequence[str], text: str) -> str | None:
        """The first rule and its conclusion ("RULE. So CLAIM.")."""
        text = text.strip()
        m = re.match(r"(.+?\.)\s*So\s+(.+?\.)", text)
        if m:
            return f"{m.group(1)} So {m.group(2)}"
        first = _sentences(text)
        return first[0] if first else None

    # --- check --------------------------------------------------------------------------

    def validate(self, problem: Ontology, steps: Sequence[str], thought: str) -> Verdict:
        """The rule must be one of the problem's and apply to the last property proved; its conclusion is repaired.

        A bare conclusion ("So Alex is an insect.") is accepted when exactly one applicable rule gives it."""
        last = self.last(problem, steps)
        if self.is_goal(problem, steps):
            return Verdict(False, thought, "the query is decided already")
        rule = self._rule_of(problem, thought)
        if rule is None:
            claim = thought.strip().removeprefix("So ").strip()
            giving = [r for r in applicable(problem, last) if r.then.said_of(problem.entity) == claim]
            if len(giving) != 1:
                return Verdict(False, thought, "names no rule of the question that applies")
            rule = giving[0]
        elif rule.subject != last.term.lower() or last.negated or not last.noun:
            return Verdict(False, thought, f"{rule.text!r} does not apply to "
                                           f"{last.said_of(problem.entity)!r}")
        canonical = f"{rule.text} So {rule.then.said_of(problem.entity)}"
        return Verdict(True, canonical, None if " ".join(thought.split()) == canonical else "conclusion rewritten")

    # --- evaluate -----------------------------------------------------------------------

    def exact_value(self, problem: Ontology, steps: Sequence[str]) -> float | None:
        """1 where the query is decided (a chain of the problem's own rules entails its answer), 0 at a dead end."""
        if self.is_goal(problem, steps):
            return 1.0
        if steps and self.is_terminal(problem, steps):
            return 0.0
        return None

    def value(self, problem: Ontology, steps: Sequence[str]) -> Query:
        """Does the chain so far lead towards deciding the query (yes / no)?"""
        user = (f"Q: {problem.text}\nA: {self._steps_text(problem, steps)}\n"
                "Does this chain lead towards deciding the claim?")
        q = few_shot_query("Judge whether the chain of reasoning is on the way to decide the claim: yes or no.",
                           _VALUE_EXAMPLES, user, 4, stop=("\n",))
        return Query(q.prompt, max_tokens=4, stop=q.stop, choices=("yes", "no"))

    def parse_value(self, problem: Ontology, steps: Sequence[str], texts: Sequence[str]) -> float:
        """The share of samples that say yes."""
        return sum(1.0 for t in texts if t.strip().lower().startswith("yes")) / max(1, len(texts))

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: Ontology, steps: Sequence[str], reply: str | None) -> str | None:
        """The chain in RAP's layout, then the answer it entails ("The answer is true."); no answer when undecided."""
        chain = self._steps_text(problem, steps)
        if not self.is_goal(problem, steps):
            return chain if steps else None
        holds = self.last(problem, steps).negated == problem.query.negated
        return f"{chain} The answer is {'true' if holds else 'false'}."

    def check_answer(self, problem: Ontology, answer: str | None) -> bool | None:
        """Answer accuracy against the answer the rules entail."""
        found = gold(problem)
        return None if found is None else answer_correct(found[0], answer)


class ProntoQAProofTask(ProntoQATask):
    """The same search, scored by proof accuracy (llm-reasoners' exact match of the chain's conclusions)."""

    name = "prontoqa_proof"
    description = "PrOntoQA scored by proof accuracy: the conclusions after each 'So' equal the gold chain's"

    def check_answer(self, problem: Ontology, answer: str | None) -> bool | None:
        """Proof accuracy against the chain the rules entail."""
        found = gold(problem)
        return None if found is None else proof_correct(found[1], answer)


_VALUE_EXAMPLES = (
    (f"{EXAMPLES[0][0]}\nA: Tom is a cat. Cats are felines. So Tom is a feline.\n"
     "Does this chain lead towards deciding the claim?", "yes"),
    (f"{EXAMPLES[1][0]}\nA: Olive is an oak. Oaks are tall. So Olive is tall.\n"
     "Does this chain lead towards deciding the claim?", "no"),
)
