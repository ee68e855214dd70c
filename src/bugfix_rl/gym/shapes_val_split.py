"""The `shapes_val` split: 50 tasks from the task generator's reserved validation templates (seed 0).

Written by `python -m bugfix_rl.gym.generator`; do not edit: tests/test_generator.py checks that it is
what `generator.shapes_tasks(split="shapes_val")` gives. gym/tasks.py serves it as `make_tasks("shapes_val")`.
"""

# (name, buggy source, public tests, hidden tests)
SHAPES_VAL = (('minmax/two_caps-dbadac91',
  'def lambda_(lim, base_v):\n    z = max(lim, 5)\n    val = min(base_v, 7)\n    return z + val\n',
  (((5, 5), 12), ((10, 12), 17), ((0, 2), 7)),
  (((-2, 0), 5), ((8, 7), 12), ((-2, -3), 5), ((-11, -4), -4), ((6, 0), 12), ((7, 7), 12))),
 ('minmax/list_then_cap-dbcd47f4',
  'def quartz(qty):\n    d = min(qty)\n    return max(d, 4)\n',
  ((([-1, 3, -1],), 3), (([4, 9, 3, 6],), 4), (([-2, 5, 6],), 4)),
  ((([5, 5],), 4),
   (([-2, 8, 5],), 4),
   (([2, 9, 7, -2],), 4),
   (([1, 5, 3, 8],), 4),
   (([0],), 0),
   (([0, 1],), 1))),
 ('minmax/nested_constants-a59e63d1',
  'def kappa(elem, qty):\n    return min(max(elem, 8), max(qty, 2))\n',
  (((8, 0), 8), ((-1, 2), 2), ((2, 0), 2)),
  (((11, 12), 8), ((6, 2), 6), ((-1, 10), 2), ((10, 11), 8), ((3, -2), 3), ((-4, -4), -4))),
 ('minmax/two_caps-37ac64ab',
  'def theta(mark, seq):\n    item = max(mark, 5)\n    qty = min(seq, 7)\n    return item + qty\n',
  (((0, 0), 7), ((4, 2), 11), ((1, 3), 8)),
  (((6, 11), 16), ((4, 4), 11), ((6, 1), 12), ((8, 9), 14), ((4, 6), 11), ((1, -4), 8))),
 ('minmax/list_then_cap-07a344a0',
  'def gamma(d):\n    acc_b = min(d)\n    return max(acc_b, 6)\n',
  ((([-1, -3, 3],), 3), (([3, -2],), 3), (([5, 8, -1],), 6)),
  ((([9, 1, -1, 2],), 6),
   (([4, 0, -2],), 4),
   (([9],), 6),
   (([8, 8, -2, 4],), 6),
   (([3],), 3),
   (([1, -3, 6, -1],), 6))),
 ('minmax/nested_constants-9cc0ad3b',
  'def ember(r, base_v=6):\n'
  '    """Compute the answer from the inputs."""\n'
  '    return max(min(r, 9), min(base_v, 6))\n',
  (((3, 0), 6), ((-2, -2), 6), ((4, 6), 6)),
  (((7, 7), 7), ((10, -3), 6), ((7, 16), 9), ((-3,), 6), ((-4, 3), 6), ((3,), 6))),
 ('minmax/two_caps-9786518c',
  'def tango(r, idx):\n    bound = max(r, 7)\n    d = min(idx, 9)\n    return bound + d\n',
  (((1, 12), 13), ((-4, 0), 5), ((0, 2), 9)),
  (((1, 9), 10), ((9, 10), 17), ((11, 7), 16), ((1, 5), 10), ((6, -2), 15), ((12, 10), 17))),
 ('minmax/list_then_cap-b43811cb',
  'def zeta(lim):\n    """Work out the value asked for."""\n    mark = min(lim)\n    return max(mark, 5)\n',
  ((([0, 1],), 1), (([-3, -1],), -1), (([9, 9, 0],), 5)),
  ((([6, 3, -3],), 5),
   (([0],), 0),
   (([0, 4, 0, 3],), 4),
   (([7, 4, 0, 3],), 5),
   (([2, -1, 6, -1],), 5),
   (([5],), 5))),
 ('minmax/nested_constants-3542085d',
  'def gamma(y, arg=2):\n    return min(max(y, 9), max(arg, 2))\n',
  (((9, -3), 9), ((9, 10), 9), ((9, 11), 9)),
  (((2, 6), 2), ((1, 9), 2), ((7,), 7), ((-4, -4), -4), ((10, -4), 9), ((4,), 4))),
 ('minmax/two_caps-d1cedb43',
  'def bravo(base_v, idx=11):\n    r = min(base_v, 4)\n    num = max(idx, 5)\n    return r + num\n',
  (((6, 6), 11), ((10, 4), 14), ((-3, -2), 2)),
  (((7,), 12), ((0, 2), 6), ((-3, 1), 5), ((8, 0), 8), ((-4,), 9), ((6, 11), 11))),
 ('range/list_then_sum-7b8a1ee3',
  'def sigma(item=4):\n    bound = [qty + 5 for qty in range(1, item)]\n    return sum(bound)\n',
  (((8,), 76), ((0,), 0), ((9,), 90)),
  (((4,), 30), ((2,), 13), ((6,), 51), ((5,), 40), ((7,), 63), ((), 30))),
 ('range/plain_add-b805f5c7',
  'def delta(bound):\n    d = 0\n    for arg in range(1, bound):\n        d = d + arg * 2\n    return d\n',
  (((4,), 20), ((8,), 72), ((0,), 0)),
  (((6,), 42), ((5,), 30), ((1,), 2), ((3,), 12), ((2,), 6), ((7,), 56))),
 ('range/horner-8df994a1',
  'def alpha(g):\n    idx = 1\n    for num in range(1, g):\n        idx = idx * 4 + num\n    return idx\n',
  (((7,), 23663), ((3,), 91), ((0,), 1)),
  (((1,), 5), ((9,), 378649), ((6,), 5914), ((10,), 1514606), ((5,), 1477), ((2,), 22))),
 ('range/list_then_sum-0a57f7d9',
  'def zeta(item):\n'
  '    """Work out the value asked for."""\n'
  '    sz = [step_n * step_n for step_n in range(1, item)]\n'
  '    return sum(sz)\n',
  (((2,), 5), ((0,), 0), ((8,), 204)),
  (((4,), 30), ((6,), 91), ((7,), 140), ((3,), 14), ((10,), 385), ((5,), 55))),
 ('range/plain_add-8a300b17',
  'def ember(arg):\n    f = 0\n    for base_v in range(1, arg):\n        f = f + base_v * 6\n    return f\n',
  (((5,), 90), ((0,), 0), ((4,), 60)),
  (((6,), 126), ((7,), 168), ((1,), 6), ((8,), 216), ((3,), 36), ((2,), 18))),
 ('range/horner-0fec1a52',
  'def nova(cnt):\n'
  '    arg = 1\n'
  '    for step_n in range(1, cnt):\n'
  '        arg = arg * 7 + step_n\n'
  '    return arg\n',
  (((4,), 2867), ((0,), 1), ((2,), 58)),
  (((6,), 140524), ((9,), 48200140), ((7,), 983675), ((8,), 6885733), ((1,), 8), ((3,), 409))),
 ('range/list_then_sum-e3a68cb2',
  'def kappa(elem):\n    z = [num + 8 for num in range(1, elem)]\n    return sum(z)\n',
  (((9,), 117), ((7,), 84), ((0,), 0)),
  (((10,), 135), ((3,), 30), ((1,), 9), ((8,), 100), ((2,), 19), ((5,), 55))),
 ('range/plain_add-0fd880ef',
  'def ember(base_v=2):\n'
  '    e = 0\n'
  '    for acc_b in range(1, base_v):\n'
  '        e = e + acc_b * 5\n'
  '    return e\n',
  (((1,), 5), ((7,), 140), ((0,), 0)),
  (((), 15), ((4,), 50), ((6,), 105), ((5,), 75))),
 ('range/horner-b7ae1194',
  'def lambda_(d=0):\n'
  '    arg = 1\n'
  '    for base_v in range(1, d):\n'
  '        arg = arg * 2 + base_v\n'
  '    return arg\n',
  (((7,), 375), ((0,), 1), ((5,), 89)),
  (((1,), 3), ((), 1), ((3,), 19), ((4,), 42), ((2,), 8))),
 ('range/list_then_sum-ed72e992',
  'def gamma(key):\n    lim = [q * 7 for q in range(1, key)]\n    return sum(lim)\n',
  (((7,), 196), ((0,), 0), ((3,), 42)),
  (((5,), 105), ((2,), 21), ((4,), 70), ((6,), 147), ((8,), 252), ((1,), 7))),
 ('compare/if_else_assign-2d492b36',
  'def pixel(data, d):\n'
  '    """Work out the value asked for."""\n'
  '    if data > d:\n'
  '        h = 2\n'
  '    else:\n'
  '        h = 6\n'
  '    return h\n',
  (((2, 2), 2), ((-2, 10), 6), ((9, 4), 2)),
  (((0, 0), 2), ((7, 7), 2), ((-2, -4), 2), ((9, 1), 2), ((3, 1), 2), ((-4, 2), 6))),
 ('compare/count_by_adding-a77e7926',
  'def delta(acc_b, lim):\n    sz = 0\n    for q in acc_b:\n        sz += q < lim\n    return sz\n',
  ((([8, 0, 6, 1], 1), 2), (([0, 5, 6, 2], -4), 0), (([-2, 2], 10), 2)),
  ((([-1, 0, 1], 1), 3),
   (([-3, 4, 1, 2], 9), 4),
   (([], 3), 0),
   (([2, 3, 2], 1), 0),
   (([8], 1), 0),
   (([-3], 0), 1))),
 ('compare/flag_choice-9abe7ef5',
  'def delta(elem, cnt, arg):\n    return elem > cnt if arg else elem > 8\n',
  (((8, 2, 0), True), ((8, 8, 1), True), ((8, 3, 3), True)),
  (((7, 8, 1), False),
   ((11, -2, 5), True),
   ((7, 12, 0), False),
   ((-1, -1, 8), True),
   ((0, 8, 4), False),
   ((11, 11, 5), True))),
 ('compare/if_else_assign-e3567f63',
  'def kappa(acc_b, w):\n    if acc_b < w:\n        e = 2\n    else:\n        e = 4\n    return e\n',
  (((0, 0), 2), ((-3, -3), 2), ((1, 3), 2)),
  (((0, 4), 2), ((9, 1), 4), ((4, 4), 2), ((9, 0), 4), ((13, 9), 4), ((8, 1), 4))),
 ('compare/count_by_adding-e60f0724',
  'def sigma(arg, data):\n'
  '    """Work out the value asked for."""\n'
  '    w = 0\n'
  '    for item in arg:\n'
  '        w += item < data\n'
  '    return w\n',
  ((([9, -3, 1, 0], 1), 3), (([2], 1), 0), (([], 9), 0)),
  ((([-1], 6), 1),
   (([1, 1, -2], 1), 3),
   (([6], -2), 0),
   (([], 2), 0),
   (([5, 9, -2, 7], 1), 1),
   (([], 4), 0))),
 ('compare/flag_choice-af84500b',
  'def lambda_(item, idx, elem=5):\n    return item > idx if elem else item > 2\n',
  (((10, 10, 3), True), ((5, 12, 8), False), ((8, 1, 7), True)),
  (((10, 0), True),
   ((-4, 1), False),
   ((1, 5, 5), False),
   ((9, 0, 9), True),
   ((3, 0), True),
   ((8, 8, 8), True))),
 ('compare/if_else_assign-69e9d302',
  'def zeta(f, g):\n'
  '    """Return the answer."""\n'
  '    if f > g:\n'
  '        data = 4\n'
  '    else:\n'
  '        data = 6\n'
  '    return data\n',
  (((8, 8), 4), ((4, 4), 4), ((-3, 1), 6)),
  (((10, 9), 4), ((9, 5), 4), ((1, 7), 6), ((-1, -2), 4), ((9, 10), 6), ((-2, -2), 4))),
 ('compare/count_by_adding-28ff854c',
  'def sigma(mark, qty):\n    w = 0\n    for bound in mark:\n        w += bound < qty\n    return w\n',
  ((([7, 4], 7), 2), (([4, -2, 1], 4), 3), (([5, 4], 0), 0)),
  ((([5, 8, 7, 9], 3), 0),
   (([], 9), 0),
   (([2, 6], 8), 2),
   (([3], 3), 1),
   (([6, 6], 6), 2),
   (([8, -1, 4, 9], 0), 1))),
 ('compare/flag_choice-03e7bcbb',
  'def quartz(sz, step_n, z=8):\n    return sz < step_n if z else sz < 5\n',
  (((2, 2, 3), True), ((-10, -4, 0), True), ((-2, -4, 7), False)),
  (((9, 12), True),
   ((1, 1), True),
   ((1, 1, 1), True),
   ((4, 0), False),
   ((-3, 11), True),
   ((9, -3, 9), False))),
 ('compare/if_else_assign-a13c171d',
  'def ember(val, arg):\n    if val < arg:\n        sz = 6\n    else:\n        sz = 9\n    return sz\n',
  (((5, 5), 6), ((5, 4), 9), ((5, 1), 9)),
  (((8, 5), 9), ((11, 11), 6), ((0, 9), 6), ((6, 1), 9), ((11, 12), 6), ((-2, -11), 9))),
 ('zero/quotients_list-41baef5a',
  'def delta(item, qty):\n    num = [sz // qty for sz in item]\n    return sum(num)\n',
  ((([-2, 8, 9], 0), 0), (([], 7), 0), (([6, 3], 1), 9)),
  ((([6, 5, 0, 0], 0), 0),
   (([-2], 2), -1),
   (([1, 8, -1, 1], 0), 0),
   (([9, 4], 1), 13),
   (([6], 5), 1),
   (([-2], 0), 0))),
 ('zero/running_quotient-80c065e5',
  'def nova(base_v, val):\n'
  '    num = 8\n'
  '    for mark in base_v:\n'
  '        num = num + mark // val\n'
  '    return num\n',
  ((([0], 0), 0), (([], 0), 0), (([-3, -1, -3], 9), 5)),
  ((([1, 0, 2, 6], 9), 8),
   (([2, 0], 0), 0),
   (([-1], 1), 7),
   (([6, 1, -3], 0), 0),
   (([], 7), 8),
   (([7, -1], 4), 8))),
 ('zero/square_over-64b1605b',
  'def theta(lim, key):\n    y = lim * lim\n    return y // key - 2\n',
  (((3, 0), 0), ((8, 6), 8), ((10, 6), 14)),
  (((8, 5), 10), ((10, 2), 48), ((1, 3), -2), ((11, 6), 18), ((12, 0), 0), ((-4, 2), 6))),
 ('zero/quotients_list-f66f0e2f',
  'def zeta(acc_b, step_n):\n    w = [sz // step_n for sz in acc_b]\n    return sum(w)\n',
  ((([9, 9, 2], 0), 0), (([7, 0, 4, 6], 8), 0), (([], 7), 0)),
  ((([-3, 2, 8], 1), 7), (([2, 4, 5], 1), 11), (([], 6), 0), (([0], 4), 0), (([8, 5], 0), 0), (([0], 7), 0))),
 ('zero/running_quotient-c61d856d',
  'def orbit(f, qty):\n    g = 5\n    for z in f:\n        g = g + z // qty\n    return g\n',
  ((([0, 5, 0, 2], 0), 0), (([9, 3, 7, 3], 0), 0), (([], 4), 5)),
  ((([-1, 8, 1], 0), 0),
   (([4, 2, 9, 4], 6), 6),
   (([-1, 4, 3], 6), 4),
   (([], 0), 0),
   (([8, 8, -1], 1), 20),
   (([9], 7), 6))),
 ('zero/square_over-5e91b8e0',
  'def pixel(f, num=5):\n    base_v = f * f\n    return base_v // num - 7\n',
  (((11, 0), 0), ((0, 0), 0), ((3, 4), -5)),
  (((3, 9), -6), ((8, 9), 0), ((-2, 2), -5), ((-2, 0), 0), ((7,), 2), ((-4, 0), 0))),
 ('zero/quotients_list-9fc97196',
  'def sigma(num, h):\n    q = [g // h for g in num]\n    return sum(q)\n',
  ((([5, 9], 0), 0), (([-3, -3, 1], 3), -2), (([5, 6], 9), 0)),
  ((([9, -2, 9, 4], 8), 1), (([0], 7), 0), (([8, 9], 0), 0), (([], 9), 0), (([], 3), 0), (([], 4), 0))),
 ('zero/running_quotient-d840735a',
  'def pixel(e, q):\n    acc_b = 6\n    for lst in e:\n        acc_b = acc_b + lst // q\n    return acc_b\n',
  ((([0, 1], 0), 0), (([], 2), 6), (([8, -1], 8), 6)),
  ((([], 0), 0),
   (([2, 8], 1), 16),
   (([-3, 8, 9, -2], 1), 18),
   (([-1, 4, 2], 8), 5),
   (([6], 9), 6),
   (([-3], 5), 5))),
 ('zero/square_over-26d5aab5',
  'def gamma(f, lim):\n    item = f * f\n    return item // lim - 7\n',
  (((4, 0), 0), ((12, 0), 0), ((7, 9), -2)),
  (((4, 4), -3), ((-4, 2), 1), ((1, 0), 0), ((5, 6), -3), ((10, 7), 7), ((0, 7), -7))),
 ('zero/quotients_list-2ff9eff7',
  'def bravo(base_v, u):\n    bound = [num // u for num in base_v]\n    return sum(bound)\n',
  ((([2, -2, -3], 0), 0), (([-1, -1], 5), -2), (([0, 5], 7), 0)),
  ((([3, 5, 1, 0], 0), 0),
   (([-2, 3, -1], 6), -2),
   (([0], 1), 0),
   (([9, 5], 4), 3),
   (([0], 2), 0),
   (([], 8), 0))),
 ('init/plain_product-3509d038',
  'def gamma(lst):\n    y = 0\n    for r in lst:\n        y = y * r\n    return y\n',
  ((([6, 3],), 18), (([1, -1, 8],), -8), (([5, 0, 4],), 0)),
  ((([8, 2, 2, 5],), 160),
   (([],), 1),
   (([2, -3, 8, 4],), -192),
   (([9, 6, 9],), 486),
   (([9, 1, 0],), 0),
   (([-2],), -2))),
 ('init/add_then_scale-39707add',
  'def nova(d):\n    q = 1\n    for lst in d:\n        q += lst\n        q *= 4\n    return q\n',
  ((([5, 5, -2, -3],), 1556), (([2, 1, 1, 8],), 624), (([],), 0)),
  ((([-2, 1, 9, 0],), -304),
   (([3, 9, 2],), 344),
   (([4, 6, 1, -2],), 1416),
   (([0],), 0),
   (([8],), 32),
   (([5],), 20))),
 ('init/while_growth-ca8bae47',
  'def bravo(num=5):\n'
  '    cnt = 0\n'
  '    while num != 0:\n'
  '        cnt += cnt * num\n'
  '        num = num - 1\n'
  '    return cnt\n',
  (((0,), 1), ((5,), 720), ((2,), 6)),
  (((8,), 362880), ((), 720), ((10,), 39916800), ((1,), 2), ((6,), 5040), ((4,), 120))),
 ('init/plain_product-718c02fe',
  'def quartz(y):\n'
  '    """Compute the answer from the inputs."""\n'
  '    seq = 0\n'
  '    for u in y:\n'
  '        seq = seq * u\n'
  '    return seq\n',
  ((([7, 6, 5],), 210), (([0],), 0), (([0, 2, 1],), 0)),
  ((([2],), 2),
   (([3, -3, 8],), -72),
   (([9, 5, 6, 2],), 540),
   (([7, 3],), 21),
   (([],), 1),
   (([5, 2, -1, 8],), -80))),
 ('init/add_then_scale-c79c383e',
  'def tango(q):\n'
  '    base_v = 1\n'
  '    for g in q:\n'
  '        base_v += g\n'
  '        base_v *= 5\n'
  '    return base_v\n',
  ((([9, 8, 6],), 1355), (([-1, -2],), -35), (([0],), 0)),
  ((([2, 9],), 95),
   (([-3, 8, -2],), -185),
   (([-2, 4, 2],), -140),
   (([3, -1],), 70),
   (([9, 5],), 250),
   (([4, 8, 2],), 710))),
 ('init/while_growth-28f1aeb1',
  'def quartz(lim):\n'
  '    num = 0\n'
  '    while lim != 0:\n'
  '        num += num * lim\n'
  '        lim = lim - 1\n'
  '    return num\n',
  (((4,), 120), ((2,), 6), ((7,), 40320)),
  (((1,), 2), ((8,), 362880), ((3,), 24), ((0,), 1), ((6,), 5040))),
 ('init/plain_product-ecf3c2a0',
  'def alpha(lim):\n'
  '    """Compute the answer from the inputs."""\n'
  '    base_v = 0\n'
  '    for arg in lim:\n'
  '        base_v = base_v * arg\n'
  '    return base_v\n',
  ((([3, 6],), 18), (([0, 8, 7],), 0), (([8, 0, -2],), 0)),
  ((([2],), 2), (([0],), 0), (([7, -2, 3, 5],), -210), (([3],), 3), (([-2],), -2), (([-3],), -3))),
 ('init/add_then_scale-3f3ffc34',
  'def alpha(sz):\n'
  '    """Compute the answer from the inputs."""\n'
  '    key = 1\n'
  '    for val in sz:\n'
  '        key += val\n'
  '        key *= 7\n'
  '    return key\n',
  ((([1, 2],), 63), (([3, 9],), 210), (([-1, 9, 3, 2],), 847)),
  ((([6, 9],), 357),
   (([0],), 0),
   (([3],), 21),
   (([8, -3, 4, 1],), 18382),
   (([9, -1, 6, -3],), 21539),
   (([1, 7, -1],), 679))),
 ('init/while_growth-38e89f50',
  'def gamma(h):\n'
  '    lim = 0\n'
  '    while h != 0:\n'
  '        lim += lim * h\n'
  '        h = h - 1\n'
  '    return lim\n',
  (((8,), 362880), ((6,), 5040), ((1,), 2)),
  (((7,), 40320), ((2,), 6), ((4,), 120), ((5,), 720), ((0,), 1))),
 ('init/plain_product-e39f4dcc',
  'def theta(item):\n    val = 0\n    for qty in item:\n        val = val * qty\n    return val\n',
  ((([8, 2, 6, 9],), 864), (([0, 7, -2, 4],), 0), (([0],), 0)),
  ((([7, 2, -1, 2],), -28),
   (([5, 7],), 35),
   (([],), 1),
   (([-2, 0],), 0),
   (([1, 2, -3, 7],), -42),
   (([7, -1],), -7))))
