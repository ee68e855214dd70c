"""The `shapes` split: 50 tasks from the task generator's reserved templates (seed 0).

Written by `python -m bugfix_rl.gym.generator`; do not edit: tests/test_generator.py checks that it is
what `generator.shapes_tasks()` gives. gym/tasks.py serves it as `make_tasks("shapes")`.
"""

# (name, buggy source, public tests, hidden tests)
SHAPES = (('minmax/spread_helpers-e1c803f7',
  'def tango(lim):\n    base_v = min(lim)\n    z = max(lim)\n    return z - base_v\n',
  ((([-1, -3],), -2), (([-2],), 0), (([4],), 0)),
  ((([2, 6, -3],), -9),
   (([0],), 0),
   (([4, -2, -2],), -6),
   (([-2, 2, -2, -3],), -5),
   (([8, 2],), -6),
   (([7, 2, 3],), -5))),
 ('minmax/pair_helpers-b5d3f725',
  'def ember(val, lst):\n    acc_b = max(val, lst)\n    cnt = min(val, lst)\n    return cnt * 4 + acc_b\n',
  (((2, -2), 6), ((9, 9), 45), ((-1, -1), -5)),
  (((3, 8), 35), ((12, 13), 64), ((-2, -2), -10), ((1, -4), 0), ((0, 8), 32), ((2, -3), 5))),
 ('minmax/min_of_maxes-e44489af',
  'def alpha(f, q, lim):\n    return min(max(f, q), max(q, lim))\n',
  (((9, 1, 5), 1), ((4, 7, 6), 6), ((8, 1, 1), 1)),
  (((-3, -4, 1), -4), ((0, 7, 11), 7), ((-4, 3, 0), 0), ((2, 4, -1), 2), ((4, 10, 0), 4), ((7, 1, 0), 1))),
 ('minmax/spread_helpers-e0dc9940',
  'def sigma(e):\n    lst = min(e)\n    acc_b = max(e)\n    return acc_b - lst\n',
  ((([7, 1, 6],), -6), (([7],), 0), (([2],), 0)),
  ((([6, 0, 9, 4],), -9),
   (([6, -1, 3],), -7),
   (([0],), 0),
   (([7, 7, 9, 1],), -8),
   (([-2, 5],), -7),
   (([-3, 2],), -5))),
 ('minmax/pair_helpers-aac3388d',
  'def omega(z, g=0):\n    sz = max(z, g)\n    f = min(z, g)\n    return f * 5 + sz\n',
  (((-1, 0), -1), ((-4, -4), -24), ((2, 2), 12)),
  (((9, -1), 44), ((0, 8), 40), ((2, 8), 42), ((2, 1), 11), ((9,), 45), ((8,), 40))),
 ('minmax/min_of_maxes-255bd02d',
  'def quartz(cnt, acc_b, elem):\n    return min(max(cnt, acc_b), max(acc_b, elem))\n',
  (((7, -1, 9), -1), ((16, 4, 9), 4), ((1, -3, -4), -3)),
  (((3, 8, 9), 8), ((-4, -2, -4), -4), ((6, 7, -2), 6), ((4, -4, 9), -4), ((-3, 12, 8), 8), ((7, 1, 4), 1))),
 ('minmax/spread_helpers-6ae7ff84',
  'def delta(q):\n    d = min(q)\n    sz = max(q)\n    return sz - d\n',
  ((([-2, 6, 3],), -8), (([5, 2, 0, 9],), -9), (([5],), 0)),
  ((([7, 3],), -4),
   (([4, 0, 8, -1],), -9),
   (([6, 2, 3],), -4),
   (([1, 9, -2],), -11),
   (([5, -3],), -8),
   (([5, 3, 5, -2],), -7))),
 ('minmax/pair_helpers-ab546438',
  'def kappa(elem, y):\n'
  '    """Compute the answer from the inputs."""\n'
  '    qty = min(elem, y)\n'
  '    g = max(elem, y)\n'
  '    return g * 2 + qty\n',
  (((-1, 5), 3), ((3, 3), 9), ((8, 8), 24)),
  (((12, 5), 22), ((7, -1), 5), ((11, 12), 34), ((1, 10), 12), ((3, 9), 15), ((-4, -3), -11))),
 ('minmax/min_of_maxes-290510b6',
  'def quartz(key, cnt, acc_b=5):\n    return min(max(key, cnt), max(cnt, acc_b))\n',
  (((10, 11, 1), 10), ((19, 11, 11), 11), ((1, -3, -4), -3)),
  (((-1, -1), -1), ((5, -2), -2), ((3, 7, -3), 3), ((1, 12, 10), 10), ((1, 0), 0), ((1, 1), 1))),
 ('minmax/spread_helpers-1ad05b27',
  'def omega(qty):\n    w = min(qty)\n    lim = max(qty)\n    return lim - w\n',
  ((([2, 9, 1, 5],), -8), (([0],), 0), (([3],), 0)),
  ((([5, 8],), -3),
   (([5, 5, 5, 6],), -1),
   (([7, 4, 2],), -5),
   (([5, 5],), 0),
   (([8, 2, 5, -2],), -10),
   (([5, 7, 9, -1],), -10))),
 ('range/helper_end-b47d6400',
  'def orbit(g):\n'
  '    """Work out the value asked for."""\n'
  '    num = g * 5\n'
  '    cnt = 0\n'
  '    for idx in range(1, num):\n'
  '        cnt += idx\n'
  '    return cnt\n',
  (((4,), 210), ((0,), 0), ((1,), 15)),
  (((5,), 325), ((3,), 120), ((8,), 820), ((6,), 465), ((2,), 55), ((7,), 630))),
 ('range/filtered_loop-5a120e21',
  'def orbit(lst=6):\n'
  '    acc_b = 0\n'
  '    for base_v in range(1, lst):\n'
  '        if base_v % 2:\n'
  '            acc_b += base_v\n'
  '    return acc_b\n',
  (((5,), 9), ((1,), 1), ((4,), 4)),
  (((8,), 16), ((7,), 16), ((6,), 9), ((2,), 1), ((), 9), ((3,), 4))),
 ('range/builtin_sum-0d9da42e',
  'def nova(g, h):\n    e = sum(range(g, h))\n    return e * 2\n',
  (((3, 3), 6), ((1, 6), 42), ((5, 3), 0)),
  (((1, 5), 30), ((5, 5), 10), ((0, 7), 56), ((4, 1), 0), ((8, 7), 0), ((9, 7), 0))),
 ('range/helper_end-e2e6b5eb',
  'def theta(g):\n    f = g * 7\n    q = 0\n    for u in range(1, f):\n        q += u\n    return q\n',
  (((3,), 231), ((0,), 0), ((4,), 406)),
  (((5,), 630), ((1,), 28), ((7,), 1225), ((2,), 105), ((9,), 2016), ((8,), 1596))),
 ('range/filtered_loop-f29014ae',
  'def pixel(g=5):\n'
  '    """Compute the answer from the inputs."""\n'
  '    item = 0\n'
  '    for lst in range(1, g):\n'
  '        if lst % 6:\n'
  '            item += lst\n'
  '    return item\n',
  (((8,), 30), ((6,), 15), ((0,), 0)),
  (((9,), 39), ((5,), 15), ((4,), 10), ((3,), 6), ((1,), 1), ((), 15))),
 ('range/builtin_sum-3af9d6bb',
  'def quartz(acc_b, d):\n    val = sum(range(acc_b, d))\n    return val * 4\n',
  (((2, 2), 8), ((4, 4), 16), ((4, 1), 0)),
  (((5, 5), 20), ((11, 7), 0), ((7, 7), 28), ((0, 3), 24), ((3, 1), 0), ((0, 5), 60))),
 ('range/helper_end-ca562a50',
  'def theta(sz):\n'
  '    """Compute the answer from the inputs."""\n'
  '    g = sz * 5\n'
  '    lim = 0\n'
  '    for elem in range(1, g):\n'
  '        lim += elem\n'
  '    return lim\n',
  (((9,), 1035), ((5,), 325), ((0,), 0)),
  (((1,), 15), ((3,), 120), ((2,), 55), ((8,), 820), ((6,), 465), ((4,), 210))),
 ('range/filtered_loop-06cdd67c',
  'def omega(elem):\n'
  '    z = 0\n'
  '    for item in range(1, elem):\n'
  '        if item % 2:\n'
  '            z += item\n'
  '    return z\n',
  (((9,), 25), ((1,), 1), ((6,), 9)),
  (((7,), 16), ((5,), 9), ((3,), 4), ((2,), 1), ((0,), 0), ((4,), 4))),
 ('range/builtin_sum-9168c2bf',
  'def omega(f, r):\n    data = sum(range(f, r))\n    return data * 4\n',
  (((4, 6), 60), ((6, 4), 0), ((6, 1), 0)),
  (((7, 7), 28), ((0, 7), 112), ((7, 0), 0), ((3, 2), 0), ((6, 0), 0), ((4, 4), 16))),
 ('range/helper_end-e46b6d59',
  'def kappa(idx):\n'
  '    num = idx * 5\n'
  '    acc_b = 0\n'
  '    for seq in range(1, num):\n'
  '        acc_b += seq\n'
  '    return acc_b\n',
  (((5,), 325), ((0,), 0), ((1,), 15)),
  (((9,), 1035), ((2,), 55), ((8,), 820), ((4,), 210), ((7,), 630))),
 ('compare/count_comprehension-6fa37bd8',
  'def nova(item, y):\n    return len([z for z in item if z > y])\n',
  ((([8, 0, 6, 1], 1), 3), (([-1, 0, 1], 1), 1), (([0], 2), 0)),
  ((([0], 11), 0),
   (([], 2), 0),
   (([9, 1, 0], 1), 2),
   (([4, 5, -3, 2], 6), 0),
   (([2, 7, 2, 5], 6), 1),
   (([5, 6, -1], 7), 0))),
 ('compare/both_bounds-3d1d6e08',
  'def sigma(d, mark, bound):\n    return d > mark and d < bound\n',
  (((-2, -2, 0), True), ((-7, 4, -3), False), ((12, -4, 2), False)),
  (((11, 11, 12), True),
   ((1, 10, 1), False),
   ((6, 0, -1), False),
   ((5, 3, 0), False),
   ((7, 4, 8), True),
   ((8, 10, 6), False))),
 ('compare/shifted_if-d5cad128',
  'def tango(qty, e=1):\n    """Return the answer."""\n    if qty > e + 1:\n        return 4\n    return 5\n',
  (((2, 1), 4), ((11, 11), 5), ((9, 13), 5)),
  (((5,), 4), ((3, 11), 5), ((2, 6), 5), ((-4, 0), 5), ((3,), 4), ((1, 0), 4))),
 ('compare/count_comprehension-9118939c',
  'def nova(e, u):\n    return len([r for r in e if r < u])\n',
  ((([2, 0, -2], 0), 2), (([8, 3, 0], 6), 2), (([5, 5, 7], 0), 0)),
  ((([-2, 8, 5, 9], -1), 1),
   (([3], 6), 1),
   (([0, 8], -4), 0),
   (([6, 2], 7), 2),
   (([6, -2, 3], 3), 2),
   (([], 7), 0))),
 ('compare/both_bounds-eb84e2ac',
  'def nova(u, qty, lim):\n    return u > qty and u < lim\n',
  (((6, 6, 7), True), ((2, 8, 4), False), ((1, -1, -2), False)),
  (((3, 1, -2), False),
   ((1, 2, 8), False),
   ((8, 7, 8), True),
   ((7, 2, 11), True),
   ((7, -3, -1), False),
   ((-3, -3, -2), True))),
 ('compare/shifted_if-eb58d851',
  'def theta(e, q):\n'
  '    """Work out the value asked for."""\n'
  '    if e < q - 1:\n'
  '        return 4\n'
  '    return 6\n',
  (((-3, -2), 4), ((4, 6), 4), ((5, -3), 6)),
  (((-3, -1), 4), ((9, 10), 4), ((9, 1), 6), ((6, 1), 6), ((4, 7), 4), ((-2, -6), 6))),
 ('compare/count_comprehension-053a9988',
  'def alpha(e, qty):\n    return len([sz for sz in e if sz > qty])\n',
  ((([0, 9, 3, 7], 0), 4), (([0], 0), 1), (([7], 8), 0)),
  ((([5, 8], -3), 2),
   (([0, 4, 9], 7), 1),
   (([-3, -3, 0, 6], 7), 0),
   (([-2, -1, 1], 1), 1),
   (([7, 1, -1, -1], 5), 1),
   (([4], -3), 1))),
 ('compare/both_bounds-27bd57a2',
  'def delta(val, y, w):\n    """Work out the value asked for."""\n    return val > y and val < w\n',
  (((-1, -1, 9), True), ((3, 0, 8), True), ((0, 5, 5), False)),
  (((-2, -2, 0), True),
   ((7, 11, 8), False),
   ((1, 3, 3), False),
   ((4, 10, 3), False),
   ((10, 5, 2), False),
   ((6, 2, 11), True))),
 ('compare/shifted_if-2cf740ce',
  'def tango(f, g=1):\n    """Return the answer."""\n    if f > g + 1:\n        return 7\n    return 8\n',
  (((9, 8), 7), ((13, 6), 7), ((1, 7), 8)),
  (((7, -2), 7), ((2, 5), 8), ((12, -4), 7), ((-3,), 8), ((5, 4), 7), ((10,), 7))),
 ('compare/count_comprehension-ace3a108',
  'def tango(base_v, val):\n    return len([lim for lim in base_v if lim > val])\n',
  ((([0, 9, -3], 9), 1), (([-2], -1), 0), (([0], 3), 0)),
  ((([0], 4), 0),
   (([-2, -3, 3], 0), 1),
   (([1], 11), 0),
   (([9, -2], 9), 1),
   (([5, 2, -2, 6], 1), 3),
   (([0], 0), 1))),
 ('zero/helper_chain-61e3b841',
  'def bravo(sz, item, f):\n    y = sz + item\n    acc_b = y // f\n    return acc_b * 2\n',
  (((-3, 2, 0), 0), ((0, -3, 0), 0), ((-4, 4, 6), 0)),
  (((8, 10, 8), 4), ((1, -4, 0), 0), ((8, 7, 9), 2), ((-3, 10, 3), 4), ((3, 1, 0), 0), ((11, 9, 9), 4))),
 ('zero/while_sum-21655d27',
  'def bravo(acc_b, arg):\n'
  '    r = 0\n'
  '    while acc_b != 0:\n'
  '        r += acc_b // arg\n'
  '        acc_b = acc_b - 1\n'
  '    return r\n',
  (((5, 0), 0), ((5, 5), 1), ((9, 2), 20)),
  (((6, 5), 2), ((7, 6), 2), ((1, 0), 0), ((0, 3), 0), ((0, 9), 0), ((7, 0), 0))),
 ('zero/quotient_remainder-7dc0b710',
  'def theta(h, item):\n    return h // item + h % item\n',
  (((1, 0), 0), ((0, 2), 0), ((4, 3), 2)),
  (((5, 8), 5), ((0, 9), 0), ((7, 0), 0), ((7, 7), 1), ((-3, 1), -3), ((6, 3), 2))),
 ('zero/helper_chain-3229283c',
  'def omega(val, item, cnt=8):\n    e = val + item\n    seq = e // cnt\n    return seq * 2\n',
  (((-2, 8, 0), 0), ((2, -3, 6), -2), ((3, 5, 2), 8)),
  (((11, 12, 1), 46), ((1, 0, 4), 0), ((12, 5), 4), ((5, 2, 2), 6), ((6, 7, 0), 0), ((-1, 0, 0), 0))),
 ('zero/while_sum-b735be83',
  'def quartz(qty, data):\n'
  '    num = 0\n'
  '    while qty != 0:\n'
  '        num += qty // data\n'
  '        qty = qty - 1\n'
  '    return num\n',
  (((6, 0), 0), ((5, 0), 0), ((4, 6), 0)),
  (((1, 2), 0), ((2, 2), 1), ((0, 7), 0), ((13, 8), 6), ((3, 0), 0), ((3, 8), 0))),
 ('zero/quotient_remainder-08369a2d',
  'def tango(lim, w=0):\n    return lim // w + lim % w\n',
  (((1, 0), 0), ((-4, 5), 0), ((0, 7), 0)),
  (((11, 4), 5), ((7, 7), 1), ((8,), 0), ((1, 7), 1), ((4,), 0), ((5,), 0))),
 ('zero/helper_chain-c7765c91',
  'def kappa(q, elem, val):\n    seq = q + elem\n    num = seq // val\n    return num * 6\n',
  (((6, 7, 0), 0), ((11, 1, 8), 6), ((5, 12, 6), 12)),
  (((10, 8, 8), 12), ((3, 10, 9), 6), ((-3, 9, 9), 0), ((2, -3, 0), 0), ((1, -3, 1), -12), ((8, 10, 0), 0))),
 ('zero/while_sum-f2a82d97',
  'def kappa(lim, seq):\n'
  '    cnt = 0\n'
  '    while lim != 0:\n'
  '        cnt += lim // seq\n'
  '        lim = lim - 1\n'
  '    return cnt\n',
  (((1, 0), 0), ((1, 2), 0), ((2, 4), 0)),
  (((0, 2), 0), ((4, 6), 0), ((7, 4), 4), ((4, 0), 0), ((7, 3), 7), ((1, 4), 0))),
 ('zero/quotient_remainder-a4ead56a',
  'def lambda_(mark, bound=4):\n    return mark // bound + mark % bound\n',
  (((8, 0), 0), ((2, 7), 2), ((6, 5), 2)),
  (((5,), 2), ((7, 7), 1), ((0, 7), 0), ((5, 2), 3), ((-1, 0), 0), ((-1,), 2))),
 ('zero/helper_chain-20b7f646',
  'def orbit(key, e, data):\n    lim = key + e\n    d = lim // data\n    return d * 2\n',
  (((9, 12, 0), 0), ((8, 6, 2), 14), ((0, 2, 9), 0)),
  (((-2, -2, 0), 0), ((-4, 4, 5), 0), ((7, 12, 1), 38), ((6, 3, 6), 2), ((-2, -4, 0), 0), ((-1, 7, 9), 0))),
 ('init/two_accumulators-8b33c3de',
  'def alpha(arg):\n'
  '    num = 1\n'
  '    key = 1\n'
  '    for bound in arg:\n'
  '        num += bound\n'
  '        key *= bound\n'
  '    return num + key\n',
  ((([9],), 18), (([9, 8, 6],), 455), (([-2, 4, 2],), -12)),
  ((([4, 8, 2],), 78), (([0],), 0), (([8, -3],), -19), (([2],), 4), (([0, 2],), 2), (([-1, -3, 6],), 20))),
 ('init/ternary_in_loop-b93bcf80',
  'def delta(base_v):\n'
  '    """Return the answer."""\n'
  '    f = 1\n'
  '    for cnt in base_v:\n'
  '        f += cnt if cnt % 7 else 8\n'
  '    return f\n',
  ((([-2, 5, 7],), 11), (([2],), 2), (([3, -3],), 0)),
  ((([9, 5, 5, -3],), 16),
   (([-3, 6, -2],), 1),
   (([0, 0, -3, -1],), 12),
   (([-1, 0, 1, 1],), 9),
   (([6, 1],), 7),
   (([-1, 2],), 1))),
 ('init/count_up-2ec34176',
  'def nova(f=7):\n'
  '    h = 0\n'
  '    mark = 0\n'
  '    while mark != f:\n'
  '        mark = mark + 1\n'
  '        h *= mark\n'
  '    return h\n',
  (((6,), 720), ((3,), 6), ((0,), 1)),
  (((1,), 1), ((), 5040), ((7,), 5040), ((4,), 24), ((2,), 2), ((5,), 120))),
 ('init/two_accumulators-cac75d3a',
  'def ember(g):\n'
  '    d = 1\n'
  '    bound = 1\n'
  '    for e in g:\n'
  '        d += e\n'
  '        bound *= e\n'
  '    return d + bound\n',
  ((([4, -2, 6, -3],), 149), (([3, 9],), 39), (([6, 4],), 34)),
  ((([1, 7, 0, 4],), 12),
   (([6, 9],), 69),
   (([5, 1],), 11),
   (([6, 8, 3],), 161),
   (([1, 7, -1],), 0),
   (([9, -1, 6, -3],), 173))),
 ('init/ternary_in_loop-f9c69fcb',
  'def orbit(base_v):\n'
  '    item = 1\n'
  '    for elem in base_v:\n'
  '        item += elem if elem % 2 else 4\n'
  '    return item\n',
  ((([4, 8, 2, 7],), 19), (([-3],), -3), (([4],), 4)),
  ((([5, 6],), 9),
   (([7, 1],), 8),
   (([2, 8],), 8),
   (([9, -3, 5, 5],), 16),
   (([0],), 4),
   (([1, -1, 3, 0],), 7))),
 ('init/count_up-e53def39',
  'def pixel(key=5):\n'
  '    idx = 0\n'
  '    sz = 0\n'
  '    while sz != key:\n'
  '        sz = sz + 1\n'
  '        idx *= sz\n'
  '    return idx\n',
  (((1,), 1), ((0,), 1), ((2,), 2)),
  (((), 120), ((8,), 40320), ((3,), 6), ((5,), 120), ((9,), 362880), ((6,), 720))),
 ('init/two_accumulators-3c044f67',
  'def nova(f):\n'
  '    """Compute the answer from the inputs."""\n'
  '    cnt = 1\n'
  '    lim = 1\n'
  '    for qty in f:\n'
  '        cnt += qty\n'
  '        lim *= qty\n'
  '    return cnt + lim\n',
  ((([8, 9],), 89), (([2, 1],), 5), (([0, -3],), -3)),
  ((([1, -1, 7],), 0),
   (([1, 1, 8, -3],), -17),
   (([2, -3],), -7),
   (([-3],), -6),
   (([7, 9, 2, 4],), 526),
   (([8],), 16))),
 ('init/ternary_in_loop-94b08756',
  'def nova(g):\n    sz = 1\n    for item in g:\n        sz += item if item % 2 else 5\n    return sz\n',
  ((([-1, 6],), 4), (([3, 7, 8],), 15), (([3, -1],), 2)),
  ((([2, 0, 0, -1],), 14),
   (([2, 0, 9],), 19),
   (([-2, -1],), 4),
   (([-1, 3, 8, 3],), 10),
   (([2, -1, 8, 9],), 18),
   (([1, 2, -2, 8],), 16))),
 ('init/count_up-49fb9c79',
  'def nova(data):\n'
  '    """Return the answer."""\n'
  '    idx = 0\n'
  '    num = 0\n'
  '    while num != data:\n'
  '        num = num + 1\n'
  '        idx *= num\n'
  '    return idx\n',
  (((8,), 40320), ((1,), 1), ((2,), 2)),
  (((6,), 720), ((10,), 3628800), ((3,), 6), ((5,), 120), ((7,), 5040), ((0,), 1))),
 ('init/two_accumulators-3d2898f2',
  'def bravo(w):\n'
  '    cnt = 1\n'
  '    elem = 1\n'
  '    for lst in w:\n'
  '        cnt += lst\n'
  '        elem *= lst\n'
  '    return cnt + elem\n',
  ((([0, 3, 1],), 4), (([8, -1, -3, 5],), 129), (([-2, 6],), -8)),
  ((([-2],), -4),
   (([4, -1],), -1),
   (([3, -2, 1, 5],), -23),
   (([7, -2, 3],), -34),
   (([-3, 9],), -21),
   (([5, 5, 2],), 62))))
