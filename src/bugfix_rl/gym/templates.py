"""The task generator's templates: one body form per entry, each the CORRECT function of one family.

A template's body is Python source with placeholders that `gym/generator.py` fills in on the syntax
tree: parameters `A B C` (in the order of `params`, each with the kind of value its tests draw),
locals `P Q` (and `R`, which only gym/grammar.py's bodies use), loop variable `I`, integer constants
`K J` (drawn distinct, K < J), and `TERM` (an expression in `I` drawn from `terms`). The generator then
injects the family's bug into the tree:

| family  | correct body has                         | the bug (what the family's fix op undoes)         |
|---------|------------------------------------------|---------------------------------------------------|
| minmax  | min/max calls                            | every min and max swapped                          |
| range   | the first `range` call ends at `E + 1`   | ends at `E` (or at `E - 1` when the end has no +1) |
|         | (or at a plain `E`)                      |                                                    |
| compare | inclusive `<=`/`>=` (or strict `<`/`>`)  | all strict (or the bound shifted by one: `> B + 1`)|
| zero    | `if <divisor> == 0: return 0` on top     | the guard removed                                  |
| init    | an accumulator set to 0 (sum) or 1 (prod)| the first such line flipped (0 <-> 1)              |

`mirror` templates may also be drawn mirrored (min <-> max, `>=` <-> `<=`, `>` <-> `<`): another
function, the same bug.
Families stay apart for the ops and the oracle's keyword rule (gym/agents/scripted.infer_op): only minmax
bodies call min/max, only range bodies call range (once, with no parentheses inside), only zero bodies
divide with `//` (by a parameter, first), only compare bodies compare with `<`/`>`; init bodies have
none of these. Every loop ends on every input of its kinds, under every op (the edit menu runs all
ops' versions in-process, without a timeout): `while X != 0` counts a `small` parameter (never
negative) down, or a counter up to one, and no op rewrites those lines.

`reserved` templates are held out by shape: training draws never see their body forms. Those without
`validation` build the `shapes` split (a test split: read once, at the end); those with it build the
`shapes_val` split, on which a recipe that should carry over to new shapes is chosen (15 other forms, 3
per family, written after the `shapes` ones, in the same spirit: helper locals, two-line fixes, lists,
comprehensions, if/else, loops that update twice).
"""

from __future__ import annotations

from dataclasses import dataclass

INT_KINDS = ("int", "nat", "small")  # kinds of one integer (ties and constants are drawn between these)


@dataclass(frozen=True)
class Template:
    """One body form. id: 'family/form'; params: (placeholder, kind) in def order, kinds of
    differential_tests.KINDS; body: the correct body; terms: choices for TERM; divisor: the zero family's
    divisor parameter (its guard is added to the correct body); reserved: held out by shape; validation:
    a reserved template of the `shapes_val` split rather than the `shapes` one."""

    id: str
    params: tuple[tuple[str, str], ...]
    body: str
    reserved: bool = False
    terms: tuple[str, ...] = ()
    mirror: bool = False
    divisor: str = ""
    validation: bool = False

    @property
    def family(self) -> str:
        return self.id.split("/")[0]


def _t(id, params, body, **options) -> Template:
    return Template(id, tuple(tuple(p.split(":")) for p in params.split()), body.strip("\n"), **options)


_SUM_TERMS = ("I", "I * I", "I * K", "I + K")
THREE_INTS, TWO_INTS = "A:int B:int C:int", "A:int B:int"
_VAL = {"reserved": True, "validation": True}

TEMPLATES: tuple[Template, ...] = (
    # ---- minmax
    _t("minmax/clamp", THREE_INTS, "return max(B, min(A, C))", mirror=True),
    _t("minmax/clamp_helper", THREE_INTS, "P = min(A, C)\nreturn max(B, P)", mirror=True),
    _t("minmax/clamp_constants", "A:int", "return max(K, min(A, J))"),  # K < J; mirrored it is constant
    _t("minmax/of_three", THREE_INTS, "return max(A, max(B, C))", mirror=True),
    _t("minmax/loop_best", "A:nelist", "P = A[0]\nfor I in A:\n    P = min(P, I)\nreturn P", mirror=True),
    _t("minmax/spread", "A:nelist", "return max(A) - min(A)", mirror=True),
    _t("minmax/flag_if", "A:int B:int C:nat", "if C:\n    return min(A, B)\nreturn max(A, B)", mirror=True),
    _t("minmax/flag_ternary", "A:int B:int C:nat", "return min(A, B) * K if C else max(A, B)", mirror=True),
    _t("minmax/capped_sum", "A:list", "P = 0\nfor I in A:\n    P += min(I, K)\nreturn P", mirror=True),
    _t("minmax/spread_helpers", "A:nelist", "P = min(A)\nQ = max(A)\nreturn Q - P", reserved=True, mirror=True),
    _t("minmax/pair_helpers", TWO_INTS, "P = min(A, B)\nQ = max(A, B)\nreturn Q * K + P", reserved=True,
       mirror=True),
    _t("minmax/min_of_maxes", THREE_INTS, "return min(max(A, B), max(B, C))", reserved=True, mirror=True),
    # ---- range
    _t("range/sum_loop", "A:small", "P = 0\nfor I in range(1, A + 1):\n    P += TERM\nreturn P", terms=_SUM_TERMS),
    _t("range/product_loop", "A:small", "P = 1\nfor I in range(2, A + 1):\n    P *= I\nreturn P"),
    _t("range/count_step", "A:nat", "P = 0\nfor I in range(0, A + 1, K):\n    P += 1\nreturn P"),
    _t("range/generator_sum", "A:small", "return sum(TERM for I in range(1, A + 1))", terms=_SUM_TERMS),
    _t("range/one_argument", "A:small", "P = 0\nfor I in range(A + 1):\n    P += TERM\nreturn P", terms=_SUM_TERMS),
    _t("range/span_sum", "A:small B:small", "P = 0\nfor I in range(A, B + 1):\n    P += I\nreturn P"),
    _t("range/filtered_list", "A:nat", "P = [I for I in range(1, A + 1) if I % K]\nreturn len(P)"),
    _t("range/first_terms", "A:small", "P = 0\nfor I in range(0, A):\n    P += TERM\nreturn P",
       terms=("2 * I + 1", "I * K", "I + K")),
    _t("range/helper_end", "A:small", "Q = A * K\nP = 0\nfor I in range(1, Q + 1):\n    P += I\nreturn P",
       reserved=True),
    _t("range/filtered_loop", "A:nat", "P = 0\nfor I in range(1, A + 1):\n    if I % K:\n        P += I\nreturn P",
       reserved=True),
    _t("range/builtin_sum", "A:small B:small", "P = sum(range(A, B + 1))\nreturn P * K", reserved=True),
    # ---- compare
    _t("compare/direct", TWO_INTS, "return A >= B", mirror=True),
    _t("compare/offset", TWO_INTS, "return A + K >= B", mirror=True),
    _t("compare/sum_bound", THREE_INTS, "return A + B >= C", mirror=True),
    _t("compare/if_return", TWO_INTS, "if A >= B:\n    return True\nreturn False", mirror=True),
    _t("compare/ternary", TWO_INTS, "return K if A >= B else J", mirror=True),
    _t("compare/difference", TWO_INTS, "P = A - B\nreturn P >= K", mirror=True),
    _t("compare/between", THREE_INTS, "return B <= A <= C", mirror=True),
    _t("compare/count_loop", "A:list B:int", "P = 0\nfor I in A:\n    if I >= B:\n        P += 1\nreturn P",
       mirror=True),
    _t("compare/count_comprehension", "A:list B:int", "return len([I for I in A if I <= B])", reserved=True,
       mirror=True),
    _t("compare/both_bounds", THREE_INTS, "return A >= B and A <= C", reserved=True),
    _t("compare/shifted_if", TWO_INTS, "if A > B:\n    return K\nreturn J", reserved=True, mirror=True),
    # ---- zero (the guard on the divisor B is added to the correct body)
    _t("zero/divide", "A:int B:nat", "return A // B", divisor="B"),
    _t("zero/scaled", "A:int B:nat", "return A * K // B", divisor="B"),
    _t("zero/shifted", "A:int B:nat", "return (A + K) // B", divisor="B"),
    _t("zero/helper", "A:int B:nat", "P = A // B\nreturn P + K", divisor="B"),
    _t("zero/two_parts", "A:int C:int B:nat", "return A // B + C // B", divisor="B"),
    _t("zero/ternary", "A:int B:nat", "return A // B if A else K", divisor="B"),
    _t("zero/loop_total", "A:list B:nat", "P = 0\nfor I in A:\n    P += I\nreturn P // B", divisor="B"),
    _t("zero/if_return", "A:int B:nat", "if A:\n    return A // B\nreturn K", divisor="B"),
    _t("zero/helper_chain", "A:int C:int B:nat", "P = A + C\nQ = P // B\nreturn Q * K", divisor="B",
       reserved=True),
    _t("zero/while_sum", "A:small B:nat", "P = 0\nwhile A != 0:\n    P += A // B\n    A = A - 1\nreturn P",
       divisor="B", reserved=True),
    _t("zero/quotient_remainder", "A:int B:nat", "return A // B + A % B", divisor="B", reserved=True),
    # ---- init
    _t("init/sum_loop", "A:list", "P = 0\nfor I in A:\n    P += TERM\nreturn P", terms=_SUM_TERMS),
    _t("init/product_loop", "A:list", "P = 1\nfor I in A:\n    P *= TERM\nreturn P", terms=("I", "I + K")),
    _t("init/while_product", "A:small", "P = 1\nwhile A != 0:\n    P *= A\n    A = A - 1\nreturn P"),
    _t("init/while_sum", "A:small", "P = 0\nwhile A != 0:\n    P += A * K\n    A = A - 1\nreturn P"),
    _t("init/count_if", "A:list", "P = 0\nfor I in A:\n    if I % K == 0:\n        P += 1\nreturn P"),
    _t("init/sum_then_scale", "A:list", "P = 0\nfor I in A:\n    P += I\nreturn P * K"),
    _t("init/weighted_sum", "A:list B:int", "P = 0\nfor I in A:\n    P += I * B\nreturn P"),
    _t("init/two_accumulators", "A:list", "P = 0\nQ = 1\nfor I in A:\n    P += I\n    Q *= I\nreturn P + Q",
       reserved=True),
    _t("init/ternary_in_loop", "A:list", "P = 0\nfor I in A:\n    P += I if I % K else J\nreturn P", reserved=True),
    _t("init/count_up", "A:small", "P = 1\nQ = 0\nwhile Q != A:\n    Q = Q + 1\n    P *= Q\nreturn P",
       reserved=True),
    # ---- the `shapes_val` split's templates (held out from training as well; none is a `shapes` form)
    _t("minmax/two_caps", TWO_INTS, "P = min(A, K)\nQ = max(B, J)\nreturn P + Q", **_VAL, mirror=True),
    _t("minmax/list_then_cap", "A:nelist", "P = max(A)\nreturn min(P, K)", **_VAL, mirror=True),
    _t("minmax/nested_constants", TWO_INTS, "return max(min(A, J), min(B, K))", **_VAL, mirror=True),
    _t("range/list_then_sum", "A:small", "P = [TERM for I in range(1, A + 1)]\nreturn sum(P)", **_VAL,
       terms=_SUM_TERMS),
    _t("range/plain_add", "A:small", "Q = 0\nfor I in range(1, A + 1):\n    Q = Q + I * K\nreturn Q", **_VAL),
    _t("range/horner", "A:small", "P = 1\nfor I in range(1, A + 1):\n    P = P * K + I\nreturn P", **_VAL),
    _t("compare/if_else_assign", TWO_INTS, "if A >= B:\n    P = K\nelse:\n    P = J\nreturn P", **_VAL, mirror=True),
    _t("compare/count_by_adding", "A:list B:int", "P = 0\nfor I in A:\n    P += I >= B\nreturn P", **_VAL,
       mirror=True),
    _t("compare/flag_choice", "A:int B:int C:nat", "return A >= B if C else A >= K", **_VAL, mirror=True),
    _t("zero/quotients_list", "A:list B:nat", "P = [I // B for I in A]\nreturn sum(P)", divisor="B", **_VAL),
    _t("zero/running_quotient", "A:list B:nat", "P = K\nfor I in A:\n    P = P + I // B\nreturn P", divisor="B",
       **_VAL),
    _t("zero/square_over", "A:int B:nat", "P = A * A\nreturn P // B - K", divisor="B", **_VAL),
    _t("init/plain_product", "A:list", "P = 1\nfor I in A:\n    P = P * I\nreturn P", **_VAL),
    _t("init/add_then_scale", "A:list", "P = 0\nfor I in A:\n    P += I\n    P *= K\nreturn P", **_VAL),
    _t("init/while_growth", "A:small", "P = 1\nwhile A != 0:\n    P += P * A\n    A = A - 1\nreturn P", **_VAL),
)

TRAINING_TEMPLATES = tuple(t for t in TEMPLATES if not t.reserved)
RESERVED_TEMPLATES = tuple(t for t in TEMPLATES if t.reserved and not t.validation)  # the `shapes` split's
VALIDATION_TEMPLATES = tuple(t for t in TEMPLATES if t.validation)  # the `shapes_val` split's
HELD_OUT_TEMPLATES = tuple(t for t in TEMPLATES if t.reserved)  # both splits': no training draw uses them
SPLIT_TEMPLATES = {"shapes": RESERVED_TEMPLATES, "shapes_val": VALIDATION_TEMPLATES}
